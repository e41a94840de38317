"""The child's one argument: a launch it decodes, or a message and exit 2 (0 for --help)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent_process.child import USAGE, parse_launch
from protocol.ids import parse_process_id
from protocol.launch import ChildLaunch, LaunchSettings, encode_launch

REPO = Path(__file__).resolve().parents[3]
LAUNCH = ChildLaunch(
    process=parse_process_id("agent:a:k:1"),
    settings=LaunchSettings(endpoint="ipc:///r/a.sock", swarm="s", bundle="b", state_root="/st"),
)


def test_the_spawner_s_launch_is_what_the_child_decodes() -> None:
    assert parse_launch([encode_launch(LAUNCH)]) == LAUNCH


@pytest.mark.parametrize("argv", [[], ["a", "b"], ["--id", "agent:a:k:1"], ["{"]])
def test_anything_else_is_a_message_and_exit_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert parse_launch(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(("usage: python -m agent_process", "python -m agent_process: "))


def test_help_says_who_starts_children(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_launch(["--help"]) == 0
    assert capsys.readouterr().out == USAGE + "\n"


def test_a_child_started_with_a_bad_launch_exits_2_before_anything_else() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "agent_process", "not a launch"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.startswith("python -m agent_process: malformed launch")
