"""`bash`: run shell commands and scripts inside the instance workspace.

Exports `exec` and `script`. The working directory must lie inside the workspace, the child
gets a scrubbed environment (no credential-like variables and no resolved secrets), output is
capped per stream, and no process the command started outlives the call, also one that detached
into its own session (`_contain`): on timeout they all get SIGTERM, then SIGKILL. Commands run
in a sandbox (`_sandbox`, `Tool.spec.sandbox`): the workspace roots writable, the rest of the
system read-only, the state root, run directory, env files and every other process invisible;
`sandbox: off` runs them with whatever the agent's uid may.

Settings (`Tool.spec.config`): `shell` (default /bin/bash, else /bin/sh), `maxOutputBytes`
(per stream, default 100000), `maxTimeoutMs` (default 600000), `killGraceMs` (SIGTERM to SIGKILL,
default 1000), `allowEnv` (variable names passed through even if they look secret),
`inheritEnv` (default true; false keeps only PATH, HOME, LANG and a few more), `roots`,
`processTracking` (`auto`, `cgroup` or `subreaper`: how the call's processes are held; default
auto = a per-call cgroup where the agent's cgroup is delegated to it, else a subreaper).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bundles.sdk import JsonObject, ToolContext, ToolFailed, load_sibling
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from bundles.base.tools import _process, _sandbox, _workspace
else:
    _process = load_sibling(__file__, "_process")
    _sandbox = load_sibling(__file__, "_sandbox")
    _workspace = load_sibling(__file__, "_workspace")

DEFAULT_TIMEOUT_MS = 30_000
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _int_setting(config: Mapping[str, Any], key: str, default: int) -> int:
    value = config.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ToolFailed(f"Tool config {key!r} must be a positive integer, got {value!r}")
    return value


def _shell(config: Mapping[str, Any]) -> str:
    configured = config.get("shell")
    if isinstance(configured, str):
        return configured
    return "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"


def _child_env(ctx: ToolContext, extra: Mapping[str, Any] | None) -> dict[str, str]:
    allow = ctx.config.get("allowEnv") or []
    if not isinstance(allow, list) or not all(isinstance(name, str) for name in allow):
        raise ToolFailed("Tool config 'allowEnv' must be a list of variable names")
    env = _process.scrub_env(
        os.environ,
        secrets=ctx.secret_values,
        allow=frozenset(allow),
        inherit=bool(ctx.config.get("inheritEnv", True)),
    )
    for name, value in (extra or {}).items():
        if not _ENV_NAME.match(name) or not isinstance(value, str):
            raise ToolFailed(
                f"env entry {name!r} is not a NAME=string pair",
                code=ErrorCode.E_TOOL_INVALID_ARGS,
            )
        env[name] = value
    return env


def _cwd(ws: _workspace.Workspace, raw: str | None) -> Path:
    cwd = ws.resolve(raw or ".")
    if not cwd.is_dir():
        raise ToolFailed(
            f"cwd {raw!r} is not a directory in the workspace",
            code=ErrorCode.E_TOOL_PATH_NOT_FOUND,
            suggestion="Create it first, or omit cwd to run in the workspace root.",
        )
    return cwd


async def _confined(
    ctx: ToolContext,
    ws: _workspace.Workspace,
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    proxy: str | None,
) -> tuple[list[str], bool] | None:
    """`argv` inside the Tool's sandbox with `env` and whether bubblewrap leads it; None:
    `sandbox: off`. `proxy`: the call's network allow-list proxy (`_sandbox.network`)."""
    box = _sandbox.settings(ctx.config)
    if box is None:
        return None
    roots = _sandbox.checked_roots(ctx.workdir, ctx.config, ws.roots)
    return await _sandbox.confine(box, argv, roots=roots, cwd=str(cwd), env=env, proxy=proxy)


async def _run(
    ctx: ToolContext, ws: _workspace.Workspace, argv: list[str], cwd: Path, input: JsonObject
) -> JsonObject:
    config = ctx.config
    timeout_ms = min(
        int(input.get("timeoutMs", DEFAULT_TIMEOUT_MS)),
        _int_setting(config, "maxTimeoutMs", 600_000),
    )
    env = _child_env(ctx, input.get("env"))
    box = _sandbox.settings(config)
    async with _sandbox.network(box, log=ctx.logger, tool="bash") as proxy:
        confined = await _confined(ctx, ws, argv, cwd, env, proxy)
        result = await _process.run_capped(
            confined[0] if confined else argv,
            cwd=cwd,
            env=_sandbox.OUTSIDE_ENV if confined else env,
            timeout_s=timeout_ms / 1000,
            max_bytes=_int_setting(config, "maxOutputBytes", 100_000),
            kill_grace_s=_int_setting(config, "killGraceMs", 1000) / 1000,
            tracking=str(config.get("processTracking", "auto")),
            sandboxed=confined is not None and confined[1],
        )
    ctx.logger.info(
        "bash.finished",
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        duration_ms=result.duration_ms,
        sandboxed=confined is not None,
    )
    return {
        "durationMs": result.duration_ms,
        "stdout": _process.redact(result.stdout, ctx.secret_values),
        "stderr": _process.redact(result.stderr, ctx.secret_values),
        "exitCode": result.exit_code,
        "signal": result.signal,
        "timedOut": result.timed_out,
        "truncated": result.truncated,
    }


async def exec_(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Run `command` with the configured shell (`-c`) in `cwd` (default: workspace root)."""
    ws = _workspace.Workspace.from_context(ctx.workdir, ctx.config)
    command = str(input["command"])
    cwd = _cwd(ws, input.get("cwd"))
    result = await _run(ctx, ws, [_shell(ctx.config), "-c", command], cwd, input)
    return {"command": command, "cwd": ws.display(cwd), **result}


async def script(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Run the workspace file `path` with interpreter `shell` (default bash) and `args`."""
    ws = _workspace.Workspace.from_context(ctx.workdir, ctx.config)
    path = ws.resolve(str(input["path"]))
    if not path.is_file():
        raise ToolFailed(
            f"script {input['path']!r} is not a file in the workspace",
            code=ErrorCode.E_TOOL_PATH_NOT_FOUND,
            suggestion="Write the script with file-system__write first.",
        )
    interpreter = str(input.get("shell") or "bash")
    found = shutil.which(interpreter)
    if found is None:
        raise ToolFailed(
            f"interpreter {interpreter!r} was not found on PATH",
            code=ErrorCode.E_TOOL_INVALID_ARGS,
            suggestion="Use an installed interpreter such as bash, sh or python3.",
        )
    args = [str(arg) for arg in input.get("args") or []]
    cwd = _cwd(ws, input.get("cwd"))
    result = await _run(ctx, ws, [found, str(path), *args], cwd, input)
    return {"path": ws.display(path), "cwd": ws.display(cwd), **result}


handlers = {"exec": exec_, "script": script}
