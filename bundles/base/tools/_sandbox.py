"""The sandbox a tool's command runs in (`Tool.spec.sandbox`): bubblewrap, or a coded refusal.

An agent's `bash` runs as the agent's uid, and so could read what the daemon keeps for itself:
the state root (other instances, logs, the journal, pending calls), the run directory (control
token and sockets), the env files with API keys, and `/proc/<agent>/mem`. In the sandbox:

- the whole file system is mounted read-only, `/tmp` is a fresh tmpfs of the call;
- the paths the agent process hands in as `hide` (state root, run and log roots, env files) are
  covered by an empty tmpfs (a file by /dev/null), then the workspace roots are bound writable
  again, so the instance's own workdir (inside the state root) is all of the root it sees;
- a PID namespace with its own /proc: the agent and every other process are invisible, and when
  the call's processes are killed the kernel ends the namespace, so nothing outlives the call;
- `--cap-drop ALL` (the daemon may run as root: a root sandbox with capabilities could unmount
  the tmpfs or ptrace anything), no new privileges, a session of its own (no TIOCSTI);
- the network is shared unless `network: false` (then only a loopback of its own).

The holder of the call's processes (`_contain`) wraps bubblewrap, not the reverse, so the
deadline, SIGTERM then SIGKILL and the output caps stay as they were. `file-system`'s ripgrep
runs in the same sandbox with the roots read-only. Config comes from
`ctx.config["sandbox"]` (`{mode, network, hide}`, put there by the agent process).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bundles.sdk import ToolFailed
from protocol.errors import ErrorCode

OFF_MODES = frozenset({"off", False})
_PROBE_SECONDS = 5.0
_BASE = ("--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp")
_ISOLATION = (
    "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
    "--die-with-parent", "--new-session", "--cap-drop", "ALL",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Sandbox:
    """What one call's sandbox looks like; `None` in its place means `sandbox: off`."""

    network: bool
    hide: tuple[str, ...]


def settings(config: Mapping[str, Any]) -> Sandbox | None:
    """The Tool's sandbox from `ctx.config["sandbox"]`; a handler called outside an agent
    process (no such key) is sandboxed with nothing extra hidden."""
    raw = config.get("sandbox")
    if not isinstance(raw, Mapping):
        raw = {"mode": "auto" if raw is None else raw}
    mode = raw.get("mode", "auto")
    if mode in OFF_MODES:
        return None
    if mode not in ("auto", "bubblewrap"):
        raise ToolFailed(
            f"Tool sandbox mode must be auto, bubblewrap or off, got {mode!r}",
            code=ErrorCode.E_TOOL_INVALID_ARGS,
            suggestion="Set Tool.spec.sandbox to auto, bubblewrap or off.",
        )
    hide = raw.get("hide") or ()
    return Sandbox(network=raw.get("network", True) is not False, hide=tuple(map(str, hide)))


_usable: str | None = None  # the bwrap that ran, once known
_refusal: str | None = None  # why none can, once known


async def _probe(bwrap: str) -> str | None:
    """Why `bwrap` cannot make our sandbox here (no user namespaces, seccomp of a container),
    or None when it can."""
    argv = [bwrap, *_BASE, *_ISOLATION, "--", "/bin/true"]
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        async with asyncio.timeout(_PROBE_SECONDS):
            _, err = await proc.communicate()
    except (OSError, TimeoutError) as exc:
        return f"{bwrap} did not run: {exc}"
    if proc.returncode != 0:
        return f"{bwrap} failed: {err.decode(errors='replace').strip()[:200]}"
    return None


async def bubblewrap() -> str:
    """The path of a bwrap that works here (checked once a process), or E_SANDBOX_UNAVAILABLE."""
    global _usable, _refusal
    if _usable is None and _refusal is None:
        found = shutil.which("bwrap")
        _refusal = "bwrap is not installed" if found is None else await _probe(found)
        _usable = found if _refusal is None else None
    if _usable is None:
        raise ToolFailed(
            f"this tool runs its commands in a sandbox, and none can start here: {_refusal}",
            code=ErrorCode.E_SANDBOX_UNAVAILABLE,
            suggestion="Install bubblewrap (apt-get install bubblewrap; `make install` does "
            "it), or set `sandbox: off` on the Tool to run its commands unsandboxed.",
        )
    return _usable


def _within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _cover(path: str) -> list[str]:
    """Mount options that make `path` look empty (a missing path needs nothing)."""
    if os.path.isdir(path):
        return ["--tmpfs", path]
    if os.path.lexists(path):
        return ["--ro-bind", "/dev/null", path]
    return []


def _mounts(box: Sandbox, roots: Iterable[str], bind: str) -> list[str]:
    """Hide first, then bind the roots (`bind`: --bind or --ro-bind); a hidden path inside a
    root is hidden again after it (a root `/` must not bring the state root back), and a root
    inside that again."""
    hide = [os.path.realpath(path) for path in box.hide]
    real = [os.path.realpath(root) for root in roots]
    out: list[str] = []
    for path in hide:
        if not any(_within(path, other) and path != other for other in hide):
            out += _cover(path)  # one inside another is gone with it (no empty name left)
    for root in real:
        out += [bind, root, root]
    inner = [h for h in hide if any(_within(h, r) and h != r for r in real)]
    for path in inner:
        out += _cover(path)
    for root in real:
        if any(_within(root, h) for h in inner):
            out += [bind, root, root]
    return out


def wrap(
    bwrap: str,
    box: Sandbox,
    argv: list[str],
    *,
    roots: Iterable[str],
    cwd: str,
    read_only: bool = False,
) -> list[str]:
    """`argv` as bubblewrap runs it in `box`, with `roots` bound (read-write unless
    `read_only`), in `cwd`. No fd of ours may be handed in: a directory fd opened outside is
    a way out of the sandbox's mounts (`..` from it climbs the real tree)."""
    net = () if box.network else ("--unshare-net",)
    bind = "--ro-bind" if read_only else "--bind"
    return [
        bwrap, *_BASE, *_mounts(box, roots, bind), *_ISOLATION, *net,
        "--chdir", os.path.realpath(cwd), "--", *argv,
    ]  # fmt: skip
