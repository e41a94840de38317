"""The log lines each process writes, pinned: the daemon's file and console, an agent child's
stdout in json and console formats, and Studio's --no-token warning. Each runs in its own
interpreter: structlog's configuration is process-wide (and the daemon's registers a fork hook).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
SECRET = "hunter2-secret"

EMIT = f"""
import structlog
log = structlog.get_logger("t")
structlog.contextvars.bind_contextvars(agent="a1")
log.info("hello", token="{SECRET}", n=1)
log.debug("quiet")
try:
    1 / 0
except ZeroDivisionError:
    log.exception("boom")
"""


def _run(script: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script) + EMIT],
        capture_output=True, text=True, timeout=60, env=env, check=True, cwd=ROOT,
    )  # fmt: skip


def _lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _shape(line: dict[str, Any]) -> list[str]:
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", line["timestamp"])
    assert SECRET not in json.dumps(line)
    return sorted(line)  # bound context vars come in no fixed order


def test_daemon_file_and_console_lines(tmp_path: Path) -> None:
    log_file = tmp_path / "orchestrator.log"
    done = _run(f"""
        from pathlib import Path
        from orchestrator.observe import daemonlog as logs
        logs.configure(Path({str(log_file)!r}), "json", secrets=[{SECRET!r}])
    """)
    lines = _lines(log_file.read_text())
    assert [line["event"] for line in lines] == ["hello", "quiet", "boom"]  # the file has all
    assert [_shape(line) for line in lines] == [
        sorted(["token", "n", "event", "pid", "agent", "level", "timestamp"]),
        sorted(["event", "pid", "agent", "level", "timestamp"]),
        sorted(["event", "pid", "agent", "level", "timestamp", "exception"]),
    ]
    assert lines[0]["token"] == "***" and lines[0]["n"] == 1 and lines[0]["agent"] == "a1"
    assert isinstance(lines[0]["pid"], int)
    assert lines[2]["level"] == "error" and "ZeroDivisionError" in lines[2]["exception"]
    console = _lines(done.stderr)  # --log-format json: the console repeats info and up
    assert console == [lines[0], lines[2]]


def test_daemon_console_format_and_quiet(tmp_path: Path) -> None:
    done = _run(f"""
        from pathlib import Path
        from orchestrator.observe import daemonlog as logs
        logs.configure(Path({str(tmp_path / "o.log")!r}), "console", quiet=True)
    """)
    assert "hello" not in done.stderr  # quiet: warnings and up on the console
    assert "boom" in done.stderr and "[error" in done.stderr
    assert "ZeroDivisionError" in done.stderr


def test_agent_child_json_lines_on_stdout() -> None:
    done = _run(f"""
        from agent_process import logs
        from bundles import redact
        logs.configure("json")
        redact.install([{SECRET!r}])
    """)
    lines = _lines(done.stdout)
    assert [line["event"] for line in lines] == ["hello", "quiet", "boom"]
    assert [_shape(line) for line in lines] == [
        sorted(["token", "n", "event", "agent", "level", "timestamp"]),
        sorted(["event", "agent", "level", "timestamp"]),
        sorted(["event", "agent", "level", "timestamp", "exception"]),
    ]
    assert lines[0]["token"] == "***"
    assert done.stderr == ""


def test_agent_child_console_format_redoes_the_setup() -> None:
    done = _run("""
        from agent_process import logs
        logs.configure("json")
        logs.configure("console")
    """)
    assert not done.stdout.lstrip().startswith("{")
    assert "hello" in done.stdout and "agent=a1" in done.stdout
    assert "ZeroDivisionError" in done.stdout


def test_studio_no_token_warning_is_a_json_line_on_stderr() -> None:
    done = _run("""
        import argparse
        from orchestrator.commands import studio
        studio._warn_no_token(argparse.Namespace(allow_actions=False), "http://127.0.0.1:1")
    """)
    warning, line = done.stderr.splitlines()[:2]
    assert warning.startswith("goondan studio: WARNING --no-token")
    assert list(json.loads(line)) == ["url", "allow_actions", "event", "level", "timestamp"]
    lines = _lines(line)
    assert lines[0] == {
        "url": "http://127.0.0.1:1", "allow_actions": False, "event": "studio_no_token",
        "level": "warning", "timestamp": lines[0]["timestamp"],
    }  # fmt: skip
