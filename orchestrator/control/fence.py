"""Who may use the control socket: the operator, never what runs under the daemon (issue 27).

The caller is known by the kernel, not by what it says: libzmq reads SO_PEERCRED when an ipc
connection is accepted (`orchestrator/routing/peers.py`), so pid and uid are the peer's own. A
request
is refused (E_CONTROL_FORBIDDEN, logged as `control_forbidden` with pid and uid) when:

- its peer is unknown (no credentials: not an ipc peer);
- its uid is neither the daemon's nor root's (the socket is 0600 in a 0700 run dir, so this
  only holds if those modes were loosened; root may, as it can read the token anyway);
- it runs under the daemon: the daemon itself, an agent, a tool's command, or an orphan of
  one. Orphans stay under the daemon because the fork server and the daemon are child
  subreapers (`orchestrator/supervision/orphans.py`), so killing a parent (the call's reaper) does
  not
  leave the tree. Or that cannot be told: the caller is gone when its request is read (it sent
  and exited; the operator's CLI waits for its reply), or its parent chain is deeper than any
  real one. (pid 0 is a peer in a PID namespace neither ours nor below ours: never an agent.)
- it sits in the agents' cgroup subtree, where per-agent cgroups exist (`orchestrator/
  cgroups.py`): a process that left the tree some other way (a daemon restarted under it) is
  still in its agent's cgroup;
- it carries no valid token (`<run dir>/control.token`).

The token is what keeps another local user out; it is no fence against an agent: an agent runs
as the daemon's uid and, without the tool sandbox, can read the run dir. The checks above are.
"""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass
from pathlib import Path

from orchestrator.routing.peers import descends_from
from orchestrator.supervision.cgroups import LEAF
from protocol.errors import ErrorCode, ErrorInfo

_FOR_AGENTS = "agents act through the agents tool; the control socket is the operator's"


def cgroup_of(pid: int) -> str | None:
    """The cgroup v2 path of `pid` (`/a/b`, relative to the cgroup2 mount), or None."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    return next((line[3:] for line in lines if line.startswith("0::")), None)


def within(path: str, parent: str) -> bool:
    """Whether cgroup `path` is `parent` or below it."""
    parent = parent.rstrip("/")
    return path == parent or path.startswith(parent + "/")


@dataclass(frozen=True, slots=True)
class Fence:
    token: str
    daemon_pid: int
    uid: int
    """The daemon's effective uid."""
    agents_cgroup: str | None = None
    """The parent of the agents' cgroups (relative to the cgroup2 mount), where they exist."""

    def refusal(self, token: str, pid: int | None, uid: int | None) -> ErrorInfo | None:
        """Why the caller (`pid`, `uid` from SO_PEERCRED) may not use the socket, or None."""
        why = self._who_refusal(pid, uid)
        if why is not None:
            return ErrorInfo(code=ErrorCode.E_CONTROL_FORBIDDEN, message=why,
                             suggestion=_FOR_AGENTS)  # fmt: skip
        if not hmac.compare_digest(token.encode(), self.token.encode()):
            return ErrorInfo(
                code=ErrorCode.E_CONTROL_FORBIDDEN,
                message="the request carries no valid control token",
                suggestion="run goondan as the daemon's user (it reads <run dir>/control.token)",
            )
        return None

    def _who_refusal(self, pid: int | None, uid: int | None) -> str | None:
        if pid is None or uid is None:
            return "the caller's pid and uid are unknown (not a local socket peer)"
        if uid not in (self.uid, 0):
            return f"uid {uid} is not the daemon's user (uid {self.uid}) nor root"
        under = descends_from(pid, self.daemon_pid)
        if under is None:
            return f"pid {pid} is gone or its parent chain cannot be read: who it is is unknown"
        if under:
            return f"pid {pid} runs under this daemon (an agent, one of its tools, or an orphan)"
        if self.agents_cgroup is not None:
            cgroup = cgroup_of(pid)
            if cgroup is not None and within(cgroup, self.agents_cgroup):
                return f"pid {pid} is in the agents' cgroup {cgroup}"
        return None


def agents_cgroup(parent: Path | None) -> str | None:
    """The relative path of the agents' cgroup parent `parent`
    (`orchestrator/supervision/cgroups.py`
    moved the daemon into its leaf `<parent>/orchestrator`), or None without one. None too
    when that is the root cgroup (a container's own namespace): every process is below it."""
    if parent is None:
        return None
    own = cgroup_of(os.getpid())
    if own is None or not own.endswith("/" + LEAF):
        return None
    return own.removesuffix("/" + LEAF) or None
