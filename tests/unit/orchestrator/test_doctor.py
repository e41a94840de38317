"""`goondan doctor`: passing and failing checks, the exit code and the JSON shape."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from orchestrator.cli import main
from orchestrator.commands.doctor import (
    Dependency,
    Level,
    check_dependency,
    check_python,
)
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME
from orchestrator.ingress.journal.sqlite import SqliteJournal
from protocol.endpoints import StateLayout
from protocol.events import Source, SourceKind, new_event

SECRET = "sk-doctor-test-0123456789"

SCRIPTED = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec: {provider: scripted, model: s}
"""

OPENAI = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec:
  provider: openai
  model: gpt-4o-mini
"""

REST = """\
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: a}
spec: {modelConfig: {modelRef: Model/m}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: doc}
spec: {entryAgent: Agent/a, agents: [Agent/a]}
"""


def _bundle(directory: Path, model: str = SCRIPTED) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "goondan.yaml").write_text(model + REST)
    return directory


def _doctor(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code = main(["doctor", "--json", *argv])
    out = capsys.readouterr().out
    return code, json.loads(out)


def _status(report: dict[str, Any], name: str) -> list[str]:
    return [c["status"] for c in report["checks"] if c["name"] == name]


def _check(report: dict[str, Any], name: str) -> dict[str, Any]:
    found = [c for c in report["checks"] if c["name"] == name]
    assert len(found) == 1, found
    return found[0]


def test_a_healthy_machine_and_bundle_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, report = _doctor(capsys, str(_bundle(tmp_path / "b")))
    assert code == EXIT_OK
    assert report["ok"] is True
    assert not [c for c in report["checks"] if c["status"] == "fail"]
    names = {c["name"] for c in report["checks"]}
    assert {"python", "state root", "bundle", "pyzmq", "PyYAML", "ipc path", "systemd"} <= names
    assert _check(report, "bundle")["detail"].endswith("is valid (swarm doc)")
    assert "/run/doc/control.sock" in _check(report, "ipc path")["detail"]


def test_human_output_lists_checks_and_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor", str(_bundle(tmp_path / "b"))]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("ok    python")
    assert lines[-1].endswith("0 fail")


def test_unwritable_state_root_fails_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a directory cannot be made under a file, even by root
    code, report = _doctor(capsys, "--state-root", str(blocker / "state"))
    assert code == EXIT_RUNTIME
    assert report["ok"] is False
    check = _check(report, "state root")
    assert check["status"] == "fail"
    assert "GOONDAN_STATE_ROOT" in check["fix"]


def test_ipc_path_too_long_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deep = tmp_path / ("d" * 100)
    code, report = _doctor(capsys, "--state-root", str(deep), str(_bundle(tmp_path / "b")))
    assert code == EXIT_RUNTIME
    check = _check(report, "ipc path")
    assert check["status"] == "fail"
    assert "E_ENDPOINT_TOO_LONG" in check["detail"]


def test_missing_api_key_env_var_fails_and_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DOCTOR_TEST_KEY", raising=False)
    model = OPENAI + "  apiKey: {valueFrom: {env: DOCTOR_TEST_KEY}}\n"
    code, report = _doctor(capsys, str(_bundle(tmp_path / "b", model)))
    assert code == EXIT_RUNTIME
    check = _check(report, "Model/m")
    assert check["status"] == "fail"
    assert "DOCTOR_TEST_KEY" in check["detail"]
    assert "DOCTOR_TEST_KEY" in check["fix"]
    # never "ok" and "fail" about the same bundle: it loads, but its Model cannot run
    assert "ok" not in _status(report, "bundle")
    [verdict] = [c for c in report["checks"] if c["name"] == "bundle" and c["status"] == "fail"]
    assert "Model/m" in verdict["detail"]


def test_an_entry_that_fails_to_import_fails_the_bundle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = _bundle(tmp_path / "b")
    tool = """---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: t}
spec: {entry: ./t.py, exports: [{name: go, parameters: {type: object}}]}
"""
    main_file = directory / "goondan.yaml"
    main_file.write_text(main_file.read_text().replace(
        "spec: {modelConfig: {modelRef: Model/m}}", "spec: {modelConfig: {modelRef: Model/m}, "
        "tools: [Tool/t]}") + tool)  # fmt: skip
    (directory / "t.py").write_text("handlers = {}\n")
    code, report = _doctor(capsys, str(directory))
    assert code == EXIT_RUNTIME
    assert _status(report, "bundle") == ["fail"]
    assert "E_TOOL_LOAD" in _check(report, "bundle")["detail"]


def test_present_api_key_passes_and_is_never_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCTOR_TEST_KEY", SECRET)
    model = OPENAI + "  apiKey: {valueFrom: {env: DOCTOR_TEST_KEY}}\n"
    bundle = _bundle(tmp_path / "b", model)
    code = main(["doctor", "--json", str(bundle)])
    out = capsys.readouterr().out
    assert code == EXIT_OK
    assert _check(json.loads(out), "Model/m")["status"] == "ok"
    assert SECRET not in out
    assert main(["doctor", str(bundle)]) == EXIT_OK
    assert SECRET not in capsys.readouterr().out


def test_api_key_from_dotenv_file_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DOCTOR_TEST_KEY", raising=False)
    model = OPENAI + "  apiKey: {valueFrom: {env: DOCTOR_TEST_KEY}}\n"
    bundle = _bundle(tmp_path / "b", model)
    (bundle / ".env").write_text(f"DOCTOR_TEST_KEY={SECRET}\n")
    code, report = _doctor(capsys, str(bundle))
    assert code == EXIT_OK
    assert _check(report, "Model/m")["status"] == "ok"


@pytest.mark.parametrize(
    ("extra", "status"),
    [("", "fail"), ("  endpoint: http://127.0.0.1:9/v1\n", "warn")],
)
def test_model_without_api_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: str, status: str
) -> None:
    _, report = _doctor(capsys, str(_bundle(tmp_path / "b", OPENAI + extra)))
    assert _check(report, "Model/m")["status"] == status


def test_invalid_bundle_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "goondan.yaml").write_text("apiVersion: goondan.ai/v1\nkind: Agent\n")
    code, report = _doctor(capsys, str(tmp_path))
    assert code == EXIT_RUNTIME
    check = _check(report, "bundle")
    assert check["status"] == "fail"
    assert check["fix"] == f"goondan validate {tmp_path}"


def test_unknown_swarm_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _doctor(capsys, str(_bundle(tmp_path / "b")), "--swarm", "nope")
    assert code == EXIT_RUNTIME
    assert _status(report, "bundle") == ["fail"]


def test_without_a_bundle_the_bundle_check_is_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, report = _doctor(capsys)
    assert code == EXIT_OK
    assert "skipped" in _check(report, "bundle")["detail"]


def test_goondan_yaml_in_the_working_directory_is_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(_bundle(tmp_path / "b"))
    _, report = _doctor(capsys)
    assert "swarm doc" in _check(report, "bundle")["detail"]


@pytest.mark.parametrize(
    ("version", "status"),
    [((3, 11, 0), Level.OK), ((3, 13, 1), Level.OK), ((3, 10, 9), Level.FAIL)],
)
def test_python_version(version: tuple[int, int, int], status: Level) -> None:
    assert check_python(version).status is status


@pytest.mark.parametrize(
    ("needed_for", "features", "status"),
    [
        (None, set(), Level.FAIL),
        ("openai", set(), Level.WARN),
        ("openai", {"openai"}, Level.FAIL),
    ],
)
def test_missing_dependency(needed_for: str | None, features: set[str], status: Level) -> None:
    check = check_dependency(Dependency("goondan_no_such_module", "nope", needed_for), features)
    assert check.status is status
    assert check.fix is not None
    assert "pip install 'nope'" in check.fix


def test_present_dependency_reports_its_version() -> None:
    check = check_dependency(Dependency("zmq", "pyzmq"), set())
    assert check.status is Level.OK
    assert "libzmq" in check.detail


async def test_the_journal_is_reported_with_its_oldest_unfinished_event(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = str(_bundle(tmp_path / "b"))
    code, report = _doctor(capsys, bundle)
    assert _check(report, "journal")["status"] == "ok"  # none yet
    path = StateLayout.from_env().journal_file("doc")
    journal = await SqliteJournal.open(path, clock=lambda: time.time() - 7200)
    source = Source(kind=SourceKind.CLI, name="t")
    await journal.append(new_event(type="m", input="x", instance_key="k", source=source),
                         "agent:a:k")  # fmt: skip
    await journal.close()
    code, report = _doctor(capsys, bundle)
    journal_check = _check(report, "journal")
    assert journal_check["status"] == "warn" and "1 unfinished" in journal_check["detail"]
    assert code == EXIT_OK  # a warning
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE entries SET event = x'c1', accepted_at = ?", (time.time(),))
    journal = await SqliteJournal.open(path)
    with capture_logs():  # not on stdout, which is the report's
        assert await journal.pending() == []  # the row that does not decode is quarantined
    await journal.close()
    code, report = _doctor(capsys, bundle)
    journal_check = _check(report, "journal")
    assert journal_check["status"] == "warn" and "1 row(s) quarantined" in journal_check["detail"]
    assert "quarantine table" in journal_check["fix"]
    for name in list(path.parent.iterdir()):
        name.unlink()
    path.write_bytes(b"not a database" * 300)
    code, report = _doctor(capsys, bundle)
    assert _check(report, "journal")["status"] == "fail"
    assert "E_JOURNAL_CORRUPT" in _check(report, "journal")["detail"]
    assert code != EXIT_OK


DOCTOR_IMPORTS = """
import json, sys
from orchestrator.cli import main
code = main(["doctor", "--json", sys.argv[1]])
print(json.dumps({"code": code, "loaded": [m for m in ("openai", "anthropic", "mcp")
                                            if m in sys.modules]}))
"""


@pytest.mark.parametrize(("model", "loaded"), [(SCRIPTED, []), (OPENAI, ["openai"])])
def test_only_the_sdks_the_bundle_uses_are_imported(
    tmp_path: Path, model: str, loaded: list[str]
) -> None:
    # an unused SDK is looked up, not imported: anthropic and mcp alone were ~2.5 s of a doctor
    # run (a fresh interpreter: this test process may have imported them already)
    import os
    import subprocess
    import sys

    bundle = _bundle(tmp_path / "b", model)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_PROCESS_")}
    env.update(GOONDAN_STATE_ROOT=str(tmp_path / "s"), OPENAI_API_KEY="sk-test-not-used")
    done = subprocess.run([sys.executable, "-c", DOCTOR_IMPORTS, str(bundle)], env=env,
                          capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["loaded"] == loaded
    report = json.loads("\n".join(done.stdout.splitlines()[:-1]))
    for name in ("openai", "anthropic", "mcp"):
        check = _check(report, name)
        assert check["status"] == "ok"
        assert ("not loaded" in check["detail"]) is (name not in loaded)
