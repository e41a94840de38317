"""`--swarm` / `--state-root` after a command's action (ARCHITECTURE.md §9: every command takes them
after its name). Found writing the chaos suite: `goondan calls list --swarm S` was a usage
error (exit 2), only `goondan calls --swarm S list` worked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli import all_commands, build_parser

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    "argv",
    [
        ["calls", "list", "--json", "--swarm", "s", "--state-root", "/r"],
        ["calls", "--swarm", "s", "--state-root", "/r", "list", "--json"],
        ["calls", "resolve", "ID", "--result", "1", "--swarm", "s", "--state-root", "/r"],
        ["instance", "list", "--swarm", "s", "--state-root", "/r"],
        ["instance", "--swarm", "s", "delete", "KEY", "--state-root", "/r"],
    ],
)
def test_common_options_before_or_after_the_action(argv: list[str]) -> None:
    args = build_parser(all_commands()).parse_args(argv)
    assert (args.swarm, args.state_root) == ("s", "/r")


def test_absent_after_the_action_keeps_none() -> None:
    args = build_parser(all_commands()).parse_args(["calls", "list"])
    assert (args.swarm, args.state_root) == (None, None)


@pytest.mark.parametrize("closed", [0, 1, 2])
def test_a_standard_stream_started_closed_is_dev_null(closed: int, tmp_path: Path) -> None:
    """`goondan send hi >&-` was a traceback (sys.stdout None); a socket opened later could
    also have taken the closed number and received what was printed."""
    script = (
        "import os, sys\n"
        f"os.close({closed})\n"  # and what Python gives a process started with it closed:
        f"setattr(sys, ('stdin', 'stdout', 'stderr')[{closed}], None)\n"
        "sys.argv = ['goondan', 'send', 'hi', '--state-root', sys.argv[1]]\n"
        "from orchestrator.cli import main\n"
        "sys.exit(main())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    if closed != 2:
        assert "E_DAEMON_NOT_RUNNING" in done.stderr
