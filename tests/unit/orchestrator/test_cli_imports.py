"""What `goondan send` and `goondan --version` import (issue 33: the CLI round trip). `send`
talks to the daemon on the standard library alone (orchestrator/control/thin_call.py); each
import that creeps into its path (msgspec, pyzmq, the daemon's logging, YAML, HTTP, the bundle
loader, an event loop, OpenSSL, dataclasses' inspect) is paid by every send a script makes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import json, sys
from orchestrator.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""

HEAVY = (
    "structlog", "yaml", "jsonschema", "httpx", "uvloop", "asyncio", "anyio", "bundles",
    "agent_process", "hashlib", "secrets", "ssl", "email", "http", "subprocess", "logging",
)  # fmt: skip
"""Top-level modules no light command loads (hashlib and secrets load OpenSSL: ~2 ms)."""
SEND_NEVER = (
    "zmq", "msgspec", "typing_extensions", "dataclasses", "inspect", "shutil", "socket",
    "uuid", "shlex",
)  # fmt: skip
"""What `send` was cut of, each measured (docs/performance.md, "The command line"): pyzmq and
msgspec ~45 ms together, dataclasses (its inspect) ~6, socket.py ~2.5, shutil (argparse's
terminal width) ~2, uuid and shlex under 1."""

SEND_OWN = {
    "orchestrator", "orchestrator.cli", "orchestrator.exitcodes", "orchestrator.commands",
    "orchestrator.commands.send", "orchestrator.control", "orchestrator.control.locate",
    "orchestrator.control.runpointer", "orchestrator.control.thin_call",
    "orchestrator.control.zmtp",
}  # fmt: skip
SEND_PROTOCOL = {
    "protocol", "protocol.durable", "protocol.endpoints", "protocol.error_codes",
    "protocol.msgpack_thin", "protocol.norich", "protocol.pids", "protocol.private",
    "protocol.stream_view", "protocol.zmtp",
}  # fmt: skip
"""No wire Structs: the request and reply are dicts in their shape (a test in
test_send_request.py decodes them with msgspec)."""


def _run(tmp_path: Path, *argv: str) -> tuple[int, list[str]]:
    # without coverage's start hook (a .pth that imports coverage, and its imports, when set)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_PROCESS_")}
    env["GOONDAN_STATE_ROOT"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", SCRIPT, *argv], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=60, check=True)  # fmt: skip
    out = json.loads(done.stdout.splitlines()[-1])
    return out["code"], out["modules"]


def _top(modules: list[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def test_send_imports_the_client_only(tmp_path: Path) -> None:
    # no daemon under the empty state root: the send fails at its first look-up (exit 1, coded
    # on stderr) after everything its path imports is loaded
    code, modules = _run(tmp_path, "send", "hi")
    assert code == 1
    assert "argparse" in _top(modules)
    assert not _top(modules) & {*HEAVY, *SEND_NEVER}
    assert {m for m in modules if m.split(".")[0] == "orchestrator"} == SEND_OWN
    assert {m for m in modules if m.split(".")[0] == "protocol"} == SEND_PROTOCOL


def test_the_other_commands_talk_without_pyzmq(tmp_path: Path) -> None:
    # status reads typed replies (msgspec) over the same standard-library transport as send
    code, modules = _run(tmp_path, "status")
    assert code == 1
    assert "msgspec" in _top(modules)
    assert not _top(modules) & {"zmq", *HEAVY}
    assert {"orchestrator.control.client", "orchestrator.control.thin_call"} <= set(modules)


def test_version_imports_no_client(tmp_path: Path) -> None:
    code, modules = _run(tmp_path, "--version")
    assert code == 0
    assert not _top(modules) & {"zmq", "msgspec", "argparse", "protocol", *HEAVY}
    assert {m for m in modules if m.startswith("orchestrator")} == {
        "orchestrator", "orchestrator.cli", "orchestrator.exitcodes"
    }  # fmt: skip


def test_send_ends_without_teardown_and_its_output_flushed(tmp_path: Path) -> None:
    # the real entry (argv from the command line) ends at os._exit (cli.QUICK_EXIT): what it
    # wrote is flushed first, its exit code kept; an atexit hook of the process never runs
    hook = "import atexit, runpy; atexit.register(print, 'teardown'); "
    run = "runpy.run_module('orchestrator', run_name='__main__')"
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_PROCESS_")}
    env["GOONDAN_STATE_ROOT"] = str(tmp_path)
    for argv, teardown in ((["send", "hi"], False), (["status"], True)):
        done = subprocess.run([sys.executable, "-c", hook + run, *argv], capture_output=True,
                              text=True, env=env, cwd=tmp_path, timeout=60)  # fmt: skip
        assert done.returncode == 1
        assert "E_DAEMON_NOT_RUNNING" in done.stderr
        assert ("teardown" in done.stdout) is teardown
