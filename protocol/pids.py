"""Whether a process id names a live process: read by the CLI (is the daemon of `active.json`
alive?) and by the bash tool (is the owner of a leftover call cgroup alive?). In protocol
because a file loaded by path may import only bundles.sdk and protocol of ours."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Signal 0: no such process is gone; one we may not signal (another user's) is alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
