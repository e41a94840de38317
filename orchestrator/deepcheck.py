"""Import every entry a bundle uses, in a throwaway process (`python -m agent_process.check`).

`validate` alone reads YAML; an entry file with no `handlers`, an export without a handler or
an import that fails only shows when an agent starts. This runs the agent process's own
loading code on every Tool, Extension and Connector entry the swarm uses, in a separate
interpreter: an entry's import may hang, crash or change its process, and none of that may
reach the CLI or the daemon. The orchestrator never imports agent_process; it reads the JSON
list of diagnostics the checker prints.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from bundles.diagnostics import Diagnostic, Severity
from protocol.errors import ErrorCode

TIMEOUT = 60.0


def _failed(bundle: Path, why: str) -> list[Diagnostic]:
    fix = "run `python -m agent_process.check BUNDLE` to see why"
    message = f"checking the entries failed: {why}"
    return [Diagnostic(ErrorCode.E_CONFIG_ENTRY_CHECK, message, str(bundle), fix)]


PROGRESS = "importing "
"""The checker's line before each import (agent_process/check.py)."""


def _why_it_died(stderr: str, code: int) -> str:
    lines = stderr.strip().splitlines()
    died = f"the checker exited with code {code}" if code >= 0 else f"killed by signal {-code}"
    if lines and lines[-1].startswith(PROGRESS):  # the entry it was importing ended it
        return f"{died} while {lines[-1]}"
    return f"{lines[-1]} ({died})" if lines else died


def deep_check(
    bundle: Path,
    *,
    env_files: Sequence[Path] = (),
    swarm: str | None = None,
    state_root: Path | None = None,
    timeout: float = TIMEOUT,
) -> list[Diagnostic]:
    argv = [sys.executable, "-m", "agent_process.check", str(bundle)]
    argv += [a for f in env_files for a in ("--env-file", str(f))]
    argv += ["--swarm", swarm] if swarm else []
    argv += ["--state-root", str(state_root)] if state_root else []
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return _failed(bundle, f"importing the entries took longer than {timeout:g} s")
    try:
        rows = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return _failed(bundle, _why_it_died(done.stderr, done.returncode))
    return [
        Diagnostic(ErrorCode(r["code"]), r["message"], r["path"], r.get("suggestion"),
                   Severity(r.get("severity", "error")))
        for r in rows
    ]  # fmt: skip
