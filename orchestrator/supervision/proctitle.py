"""Process titles, and the end of the environment block the daemon was started with.

`ps` tells the processes of a run apart: `goondan: orchestrator <swarm>`, `goondan: fork server
<swarm>`, `goondan: agent <name>@<instanceKey>`, `goondan: connector <name>` (children set their
own, `agent_process.child`).

/proc/<pid>/environ shows the block a process was exec'd with, not `os.environ`: any process of
the same user can read it, and every process forked from it shows the same bytes. setproctitle
moves the C environment elsewhere and overwrites the whole original argv+environ area with the
title, so once the daemon has set its title, the daemon, the fork server and every child forked
afterwards show an empty environment there. `os.environ` itself is untouched: the bundle still
resolves `valueFrom.env` from it. Call `set_title` before the fork server is forked and before
any thread starts (setproctitle rewrites `environ`, which is not thread-safe).
"""

from __future__ import annotations

import os

import setproctitle


def set_title(title: str) -> None:
    # SPT_NOENV would keep the original block (and its API keys) in place: never honour it
    os.environ.pop("SPT_NOENV", None)
    setproctitle.setproctitle(title)


def orchestrator(swarm: str) -> str:
    return f"goondan: orchestrator {swarm}"


def fork_server(swarm: str) -> str:
    return f"goondan: fork server {swarm}"
