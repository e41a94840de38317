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
- /run is an empty tmpfs but for systemd-resolved's directory: a unix socket is reachable on a
  read-only mount, and /run holds the system bus, systemd's and a container engine's;
- the network is shared unless `network: false` (then only a loopback of its own); an
  abstract unix socket (no path) is reachable while it is shared. `network: {allow: [...]}`
  gives it none either, but an HTTP proxy outside that reaches the hosts listed
  (`_netproxy`): bubblewrap only, the Landlock fallback refuses (it cannot filter by host).

The holder of the call's processes (`_contain`) wraps bubblewrap, not the reverse, so the
deadline, SIGTERM then SIGKILL and the output caps stay as they were. `file-system`'s ripgrep
runs in the same sandbox with the roots read-only. Config comes from
`ctx.config["sandbox"]` (`{mode, network, hide}`, put there by the agent process).

Where bubblewrap cannot run (not installed, user namespaces refused), `auto` falls back to
Landlock (`_landlock.py`, a trampoline between the holder and the command): the same paths
readable and writable, every hidden one unreadable, no ptrace or memory reads of processes
outside, and on Linux 6.12+ no signal to them (so the holder's sweep cannot be cut short);
it has no PID namespace and no fresh /tmp (/tmp is writable only where it holds no hidden
path), and `network: false` stops TCP only.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bundles.sdk import ToolFailed, load_sibling
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from bundles.base.tools import _landlock, _netproxy
else:
    _landlock = load_sibling(__file__, "_landlock")
    _netproxy = load_sibling(__file__, "_netproxy")

LANDLOCK = Path(__file__).with_name("_landlock.py")
MODES = ("auto", "bubblewrap", "landlock")

OFF_MODES = frozenset({"off", False})
_PROBE_SECONDS = 5.0
_BASE = ("--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp")
_RUN_KEPT = ("/run/systemd/resolve",)
"""What stays of /run: where systemd-resolved keeps the resolv.conf /etc links to."""
_ISOLATION = (
    "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
    "--die-with-parent", "--new-session", "--cap-drop", "ALL",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Sandbox:
    """What one call's sandbox looks like; `None` in its place means `sandbox: off`."""

    mode: str
    network: bool
    """Shared with the host; False with `allow`."""
    hide: tuple[str, ...]
    allow: tuple[_netproxy.Rule, ...] | None = None
    """`network: {allow}`: no network but the proxy to these (`_netproxy`)."""


def _network(raw: object) -> tuple[bool, tuple[_netproxy.Rule, ...] | None]:
    """`network`: true, false or `{allow: [...]}` (as `bundles.kinds.ToolSandbox` checked)."""
    if isinstance(raw, Mapping) and isinstance(raw.get("allow"), list):
        try:
            return False, _netproxy.parse_allow(raw["allow"])
        except ValueError as exc:
            problem = str(exc)
    elif isinstance(raw, bool):
        return raw, None
    else:
        problem = f"network must be true, false or {{allow: [...]}}, got {raw!r}"
    raise ToolFailed(
        f"Tool sandbox {problem}",
        code=ErrorCode.E_TOOL_INVALID_ARGS,
        suggestion="List hosts as name, *.domain or an IP address, each with an optional "
        ":port (e.g. api.github.com, *.pypi.org, 10.0.0.5:8080).",
    )


def settings(config: Mapping[str, Any]) -> Sandbox | None:
    """The Tool's sandbox from `ctx.config["sandbox"]`; a handler called outside an agent
    process (no such key) is sandboxed with nothing extra hidden."""
    raw = config.get("sandbox")
    if not isinstance(raw, Mapping):
        raw = {"mode": "auto" if raw is None else raw}
    mode = raw.get("mode", "auto")
    if mode in OFF_MODES:
        return None
    if mode not in MODES:
        raise ToolFailed(
            f"Tool sandbox mode must be auto, bubblewrap, landlock or off, got {mode!r}",
            code=ErrorCode.E_TOOL_INVALID_ARGS,
            suggestion="Set Tool.spec.sandbox to auto, bubblewrap, landlock or off.",
        )
    hide = tuple(map(str, raw.get("hide") or ()))
    network, allow = _network(raw.get("network", True))
    return Sandbox(mode=str(mode), network=network, hide=hide, allow=allow)


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
        raise _unavailable(str(_refusal))
    return _usable


def _unavailable(why: str) -> ToolFailed:
    return ToolFailed(
        f"this tool runs its commands in a sandbox, and none can start here: {why}",
        code=ErrorCode.E_SANDBOX_UNAVAILABLE,
        suggestion="Install bubblewrap (apt-get install bubblewrap; `make install` does "
        "it), or set `sandbox: off` on the Tool to run its commands unsandboxed.",
    )


OUTSIDE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "LANG": "C.UTF-8"}
"""The environment of what runs outside the sandbox (the call's holder, bubblewrap, the
Landlock trampoline before it restricts itself). The command's own environment, which the
model may set (`env`), is handed in: a LD_PRELOAD or GCONV_PATH of its choosing would
otherwise run its code in those processes, outside the sandbox."""


@contextlib.asynccontextmanager
async def network(box: Sandbox | None, *, log: Any, tool: str) -> AsyncIterator[str | None]:
    """For one call: the directory of its allow-list's proxy (`_netproxy.serve`), open until
    the call is over; None where the box has no allow-list."""
    if box is None or box.allow is None:
        yield None
        return
    async with _netproxy.serve(box.allow, log=log, tool=tool) as directory:
        yield directory


async def confine(
    box: Sandbox,
    argv: list[str],
    *,
    roots: Iterable[str],
    cwd: str,
    env: Mapping[str, str],
    proxy: str | None = None,
) -> tuple[list[str], bool]:
    """`argv` in `box` with `env`, and whether its leader is bubblewrap (see
    `_contain.open_call`); run it with OUTSIDE_ENV. `proxy`: the directory of `network`."""
    if box.mode != "landlock":
        try:
            bwrap = await bubblewrap()
            return wrap(bwrap, box, argv, roots=roots, cwd=cwd, env=env, proxy=proxy), True
        except ToolFailed:
            if box.mode == "bubblewrap" or box.allow is not None:
                raise
    if box.allow is not None:
        raise _unavailable(
            "a network allow-list needs bubblewrap (Landlock cannot tell one host from "
            "another, and the call is refused rather than run with more or less network)"
        )
    if _landlock.abi() < 1:
        why = "this kernel has no Landlock" if box.mode == "landlock" else str(_refusal)
        raise _unavailable(f"{why}; no Landlock either" if box.mode == "auto" else why)
    return wrap_landlock(box, argv, roots=roots, env=env), False


def _run_dir() -> list[str]:
    if not os.path.isdir("/run"):
        return []
    kept = [arg for path in _RUN_KEPT for arg in ("--ro-bind-try", path, path)]
    return ["--tmpfs", "/run", *kept]


def _within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def checked_roots(workdir: Path, config: Mapping[str, Any], real: list[str]) -> list[str]:
    """`real` (the workspace's roots, resolved), once none configured inside another root
    leads out of it: an earlier command may have swapped such a directory for a symlink to
    the state root, which binding it would bring into the sandbox."""
    given = [os.path.abspath(workdir / root) for root in config.get("roots") or ["."]]
    for name, resolved in zip(given, real, strict=True):
        for outer, outer_real in zip(given, real, strict=True):
            if name != outer and _within(name, outer) and not _within(resolved, outer_real):
                raise ToolFailed(
                    f"workspace root {name} leads outside {outer} (to {resolved})",
                    code=ErrorCode.E_TOOL_PATH_ESCAPE,
                    suggestion=f"Replace the symlink {name} with a directory.",
                )
    return real


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
    env: Mapping[str, str] | None = None,
    proxy: str | None = None,
) -> list[str]:
    """`argv` as bubblewrap runs it in `box`, with `roots` bound (read-write unless
    `read_only`), in `cwd`, with `env` (None: bubblewrap's own), behind the forwarder to
    `proxy` (the directory of `network`; without it an allow-list is no network at all). No
    fd of ours may be handed in: a directory fd opened outside is a way out of the sandbox's
    mounts (`..` from it climbs the real tree)."""
    net = () if box.network else ("--unshare-net",)
    bind = "--ro-bind" if read_only else "--bind"
    setenv = [] if env is None else ["--clearenv"]
    for name, value in (env or {}).items():
        setenv += ["--setenv", name, value]
    mounts = _mounts(box, roots, bind)
    if proxy is not None and box.allow is not None:
        inside = _PROXY_DIR if os.path.isdir("/run") else _PROXY_DIR_NO_RUN
        mounts += ["--bind", proxy, inside]
        setenv += _proxy_env()
        argv = _forwarder(os.path.join(inside, _netproxy.SOCKET_NAME), argv)
    return [
        bwrap, *_BASE, *_run_dir(), *mounts, *_ISOLATION, *net, *setenv,
        "--chdir", os.path.realpath(cwd), "--", *argv,
    ]  # fmt: skip


_PROXY_DIR = "/run/goondan-net"
_PROXY_DIR_NO_RUN = "/tmp/.goondan-net"  # a mount point needs a writable parent
_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def _proxy_env() -> list[str]:
    url = f"http://127.0.0.1:{_netproxy.PORT}"
    out = [arg for name in _PROXY_VARS for arg in ("--setenv", name, url)]
    return [*out, "--setenv", "NO_PROXY", "", "--setenv", "no_proxy", ""]


@functools.cache
def _python() -> str:
    """The machine's python3 (it starts faster than a venv's own build, and the forwarder
    needs nothing but its C modules), else the one running us."""
    return shutil.which("python3", path=OUTSIDE_ENV["PATH"]) or sys.executable


def _forwarder(socket_path: str, argv: list[str]) -> list[str]:
    """`argv` started by the forwarder, which relays 127.0.0.1:PORT to the proxy's socket."""
    port = str(_netproxy.PORT)
    return [_python(), "-I", "-S", "-c", _netproxy.FORWARDER, socket_path, port, *argv]


_PROC_READABLE = ("cpuinfo", "meminfo", "loadavg", "uptime", "version", "stat", "filesystems")
"""/proc is closed to a Landlock sandbox (it has no PID namespace: another process's environ
stays readable through it) but for these system-wide files."""


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)  # through symlinks: a rule holds for what the path leads to
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _guarded(hide: list[str]) -> set[tuple[int, int]]:
    """Every directory that holds a hidden path, by identity: a bind mount or a symlink of one
    elsewhere (a container's /old_root) would grant it whole under another name."""
    found = set()
    for path in hide:
        while True:
            identity = _identity(path)
            if identity is not None:
                found.add(identity)
            if path == "/":
                break
            path = os.path.dirname(path)
    return found


def _complement(top: str, hide: list[str], guarded: set[tuple[int, int]]) -> list[str]:
    """The entries beneath `top` that hold none of `hide`: whole where they hold none, split
    into their own entries where they hold one (Landlock only grants, never takes away)."""
    out = []
    try:
        names = sorted(os.listdir(top))
    except OSError:
        return []
    for name in names:
        path = os.path.join(top, name)
        if path in hide or path == "/proc":
            continue
        if _identity(path) not in guarded:
            out.append(path)
        elif not os.path.islink(path) and os.path.isdir(path):
            out += _complement(path, hide, guarded)
    return out


def wrap_landlock(
    box: Sandbox, argv: list[str], *, roots: Iterable[str], env: Mapping[str, str]
) -> list[str]:
    """`argv` behind the Landlock trampoline: everything but the hidden paths (and /proc)
    readable, the roots (but hidden paths inside them) writable."""
    hide = [os.path.realpath(path) for path in box.hide]
    guarded = _guarded(hide)
    write: list[str] = []
    for root in map(os.path.realpath, roots):
        inside = any(_within(h, root) and h != root for h in hide)
        write += _complement(root, hide, guarded) if inside else [root]
    read = _complement("/", hide, guarded) + [f"/proc/{name}" for name in _PROC_READABLE]
    grants = [*(["--no-network"] if not box.network else [])]
    grants += [arg for path in read for arg in ("--read", path)]
    grants += [arg for path in write for arg in ("--write", path)]
    grants += [arg for item in env.items() for arg in ("--env", "=".join(item))]
    return [sys.executable, "-I", "-S", str(LANDLOCK), *grants, "--", *argv]
