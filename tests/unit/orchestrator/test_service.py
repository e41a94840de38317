"""`goondan service print-unit`: the unit's structure, and `systemd-analyze verify` on it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.exitcodes import EXIT_OK, EXIT_USAGE
from orchestrator.templates.unit import quote_word

REPO = Path(__file__).resolve().parents[3]
SHIPPED = REPO / "contrib" / "systemd" / "goondan.service"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(
    SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed on this machine"
)

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: scripted}
spec: {provider: scripted, model: s}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: a}
spec: {modelConfig: {modelRef: Model/scripted}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: ops}
spec:
  entryAgent: Agent/a
  agents: [{ref: Agent/a}]
  policy: {shutdown: {gracePeriodSeconds: 60}}
"""

Unit = dict[str, dict[str, list[str]]]


def parse_unit(text: str) -> Unit:
    sections: Unit = {}
    current: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key, []).append(value)
    return sections


def _bundle(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "goondan.yaml").write_text(BUNDLE)
    return directory / "goondan.yaml"


def _print_unit(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The unit printed; a system unit names its user (the tests run as root or not)."""
    if "--user" not in argv and "--run-as" not in argv:
        argv = (*argv, "--run-as", "goondan")
    assert main(["service", "print-unit", *argv]) == EXIT_OK
    return capsys.readouterr().out


def test_system_unit_structure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = _bundle(tmp_path / "b")
    unit = parse_unit(_print_unit(capsys, str(bundle)))
    svc = unit["Service"]
    for key, value in {
        "Type": "notify",
        "NotifyAccess": "main",
        "WatchdogSec": "30",
        "KillMode": "mixed",
        "Restart": "on-failure",
        "TimeoutStopSec": "75",  # gracePeriodSeconds 60 + margin
        "RuntimeDirectory": "goondan-ops",
        "StateDirectory": "goondan",
        "LogsDirectory": "goondan",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "read-only",
        "PrivateTmp": "yes",
        "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
        "LockPersonality": "yes",
    }.items():
        assert svc[key] == [value], key
    exec_start = svc["ExecStart"][0].split()
    assert Path(exec_start[0]).is_absolute()
    assert os.access(exec_start[0], os.X_OK)
    assert Path(exec_start[0]).parent == Path(os.path.abspath(sys.executable)).parent
    assert exec_start[exec_start.index("run") + 1] == str(bundle.absolute())
    assert exec_start[exec_start.index("--swarm") + 1] == "ops"
    assert "GOONDAN_STATE_ROOT=%S/goondan" in svc["Environment"]
    assert svc["WorkingDirectory"] == [str(bundle.parent.absolute())]
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


def test_user_unit_skips_what_needs_privileges(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = _bundle(tmp_path / "b")
    unit = parse_unit(_print_unit(capsys, str(bundle), "--user", "--name", "mine.service"))
    svc = unit["Service"]
    assert "User" not in svc
    assert "ProtectSystem" not in svc
    assert "PrivateTmp" not in svc
    assert svc["NoNewPrivileges"] == ["yes"]
    assert svc["RuntimeDirectory"] == ["mine"]
    assert unit["Install"]["WantedBy"] == ["default.target"]


def test_run_as_a_dedicated_user(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = _bundle(tmp_path / "b")
    unit = parse_unit(_print_unit(capsys, str(bundle), "--run-as", "goondan"))
    assert unit["Service"]["User"] == ["goondan"]


def test_state_root_and_writable_dirs_become_read_write_paths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = _bundle(tmp_path / "b")
    root, work = tmp_path / "state", tmp_path / "work"
    argv = [str(bundle), "--state-root", str(root), "--writable", str(work)]
    svc = parse_unit(_print_unit(capsys, *argv))["Service"]
    assert f"GOONDAN_STATE_ROOT={root}" in svc["Environment"]
    assert svc["ReadWritePaths"] == [f"{root} {work}"]


def test_common_options_before_the_action_are_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = _bundle(tmp_path / "b")
    assert main(["service", "--swarm", "nope", "print-unit", str(bundle)]) == EXIT_USAGE
    assert "nope" in capsys.readouterr().err


def test_invalid_bundle_prints_errors_and_no_unit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "goondan.yaml").write_text("kind: Nope\n")
    assert main(["service", "print-unit", str(tmp_path)]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "no unit printed" in captured.err


def test_bad_unit_name_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle = _bundle(tmp_path / "b")
    assert main(["service", "print-unit", str(bundle), "--name", "a b/c"]) == EXIT_USAGE
    assert "--name" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("word", "quoted"),
    [
        ("/srv/b/goondan.yaml", "/srv/b/goondan.yaml"),
        ("/srv/my bundle", '"/srv/my bundle"'),
        ("/srv/100%", "/srv/100%%"),
        ("/srv/$HOME", "/srv/$$HOME"),
        ('/srv/a"b', '"/srv/a\\"b"'),
    ],
)
def test_quote_word(word: str, quoted: str) -> None:
    assert quote_word(word) == quoted


def _verify(unit_file: Path) -> None:
    assert SYSTEMD_ANALYZE is not None
    proc = subprocess.run(
        [SYSTEMD_ANALYZE, "verify", str(unit_file)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # verify exits 0 on unknown keys and bad values too: it only warns, naming the file.
    problems = [line for line in proc.stderr.splitlines() if unit_file.name in line]
    assert proc.returncode == 0, proc.stderr
    assert problems == []


@needs_analyze
@pytest.mark.parametrize("user", [False, True])
def test_generated_unit_passes_systemd_analyze_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], user: bool
) -> None:
    bundle = _bundle(tmp_path / "my bundle")  # a space, to prove the quoting
    text = _print_unit(capsys, str(bundle), *(["--user"] if user else []))
    unit_file = tmp_path / "goondan-ops.service"
    unit_file.write_text(text)
    _verify(unit_file)


@needs_analyze
def test_shipped_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    # The example names /opt/goondan/venv; point it at this interpreter's goondan to verify.
    script = Path(os.path.abspath(sys.executable)).parent / "goondan"
    if not script.is_file():
        pytest.skip(f"no goondan script next to {sys.executable}")
    text = SHIPPED.read_text().replace("/opt/goondan/venv/bin/goondan", str(script))
    unit_file = tmp_path / "goondan.service"
    unit_file.write_text(text)
    _verify(unit_file)


def test_shipped_unit_structure() -> None:
    svc = parse_unit(SHIPPED.read_text())["Service"]
    assert svc["Type"] == ["notify"]
    assert svc["KillMode"] == ["mixed"]
    assert int(svc["TimeoutStopSec"][0]) > 30
    assert svc["WatchdogSec"] == ["30"]
    assert svc["Restart"] == ["on-failure"]


def test_as_root_a_system_unit_must_name_its_user(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without `--run-as`, root's unit would run every agent and tool as root."""
    bundle = _bundle(tmp_path / "b")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert main(["service", "print-unit", str(bundle)]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == "" and "E_SERVICE_RUN_AS" in captured.err
    assert "--run-as USER" in captured.err
    unit = parse_unit(_print_unit(capsys, str(bundle), "--run-as", "root"))
    assert unit["Service"]["User"] == ["root"]  # said out loud, then written down
    unit = parse_unit(_print_unit(capsys, str(bundle), "--user"))
    assert "User" not in unit["Service"]


def test_what_the_unit_needs_under_tmp_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """PrivateTmp=yes gives the service an empty /tmp: a bundle there is not found."""
    assert tmp_path.is_relative_to("/tmp") or tmp_path.is_relative_to("/var/tmp")
    bundle = _bundle(tmp_path / "b")
    assert main(["service", "print-unit", str(bundle), "--run-as", "goondan"]) == EXIT_OK
    err = capsys.readouterr().err
    assert f"warning: {bundle.absolute()} is under /tmp" in err
    assert main(["service", "print-unit", str(bundle), "--user"]) == EXIT_OK
    assert "warning" not in capsys.readouterr().err  # a user unit has its own /tmp


def test_documentation_names_goondan_s_operations_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unit = parse_unit(_print_unit(capsys, str(_bundle(tmp_path / "b"))))
    docs = REPO / "docs" / "operations.md"
    assert unit["Unit"]["Documentation"] == ["man:systemd.service(5)", docs.as_uri()]
