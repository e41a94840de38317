"""`goondan validate`: exit codes, the human summary and error lines, and the --json shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.exitcodes import EXIT_OK, EXIT_USAGE
from tests.unit.bundles.conftest import FIXTURES, VALID_TAIL, write_bundle

HELLO = Path(__file__).resolve().parents[3] / "bundles" / "examples" / "hello"
KEYED_MODEL = """
---
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: gpt
spec:
  provider: openai
  model: gpt-4o-mini
  apiKey: {valueFrom: {env: GOONDAN_CLI_TEST_KEY}}
"""


def test_valid_bundle_prints_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(HELLO)]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith("goondan.yaml: valid — 1 Swarm, 1 Agent, 1 Model")


def test_invalid_bundle_lists_every_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(FIXTURES / "ref_not_found")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert (
        "goondan.yaml:27 spec.tools[1].ref: E_CONFIG_REF_NOT_FOUND Agent/main: Tool/bsh not found "
        "(closest existing: Tool/bash)"
    ) in err


def test_json_output_shape(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(HELLO), "--json"]) == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"valid", "errors", "warnings", "resources"}
    assert data["valid"] is True
    assert data["errors"] == []
    assert data["resources"]["Swarm"] == ["hello"]
    assert data["resources"]["Agent"] == ["greeter"]

    assert main(["validate", str(FIXTURES / "schema_invalid"), "--json"]) == EXIT_USAGE
    data = json.loads(capsys.readouterr().out)
    assert data["valid"] is False
    assert data["resources"] == {}
    [error] = data["errors"]
    assert set(error) == {"code", "message", "path", "suggestion", "severity"}
    assert error["message"].endswith("(field spec.modelConfig.temprature)")  # msgspec's text before
    assert {k: v for k, v in error.items() if k != "message"} == {
        "code": "E_CONFIG_SCHEMA_INVALID",
        "path": "goondan.yaml:16 spec.modelConfig.temprature",
        "suggestion": "remove the field or fix its spelling (field names are camelCase)",
        "severity": "error",
    }


def test_missing_bundle_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(tmp_path / "absent.yaml")]) == EXIT_USAGE
    assert "E_CONFIG_NOT_FOUND" in capsys.readouterr().err


def test_strict_and_env_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("GOONDAN_CLI_TEST_KEY", raising=False)
    bundle = write_bundle(tmp_path / "b", VALID_TAIL + KEYED_MODEL)
    assert main(["validate", str(bundle)]) == EXIT_OK
    captured = capsys.readouterr()
    assert "warning: goondan.yaml:33 spec.apiKey: E_CONFIG_VALUE_SOURCE" in captured.err
    assert main(["validate", str(bundle), "--strict", "--json"]) == EXIT_USAGE
    data = json.loads(capsys.readouterr().out)
    assert [e["code"] for e in data["errors"]] == ["E_CONFIG_VALUE_SOURCE"]
    assert data["warnings"] == []

    env_file = tmp_path / "keys.env"
    env_file.write_text("GOONDAN_CLI_TEST_KEY=sk-test\n")
    args = ["validate", str(bundle), "--strict", "--env-file", str(env_file)]
    assert main(args) == EXIT_OK
    assert "valid — 1 Swarm, 1 Agent, 2 Models" in capsys.readouterr().out
