""".env files and ValueSource resolution: the process environment always wins."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bundles.diagnostics import BundleError, Collector
from bundles.envfiles import EnvSyntaxError, load_env_files, parse_env
from bundles.kinds import SecretRef, ValueFrom, ValueSource
from bundles.loader import inspect_bundle, load_bundle
from bundles.values import resolve_value
from protocol.errors import ErrorCode
from tests.unit.bundles.conftest import VALID_TAIL, write_bundle

E = ErrorCode

MODEL_WITH_KEY = """
---
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: gpt
spec:
  provider: openai
  model: gpt-4o-mini
  apiKey:
    valueFrom:
      env: GOONDAN_TEST_KEY
"""


def test_parse_env_syntax() -> None:
    text = (
        "# comment\n\nA=1\nexport B = two words # trailing comment\n"
        'C="line\\nbreak \\"q\\" # kept"\nD=\'raw \\n # kept\'\nE=\nF=a#b\n'
    )
    assert parse_env(text) == {
        "A": "1",
        "B": "two words",
        "C": 'line\nbreak "q" # kept',
        "D": "raw \\n # kept",
        "E": "",
        "F": "a#b",
    }


def test_parse_env_multiline_values_and_no_interpolation() -> None:
    text = 'A="one\ntwo"\nB=${A}\nC="$A"\n'
    assert parse_env(text) == {"A": "one\ntwo", "B": "${A}", "C": "$A"}


@pytest.mark.parametrize(
    "line",
    ["JUSTAKEY", "export A", "1BAD=x", "A B=c", "=x", 'A="open', "A='open", 'A="x" junk'],
)
def test_parse_env_rejects(line: str) -> None:
    with pytest.raises(EnvSyntaxError) as info:
        parse_env("OK=1\n" + line)
    assert info.value.line == 2
    with pytest.raises(EnvSyntaxError) as info:
        parse_env("OK=1\n\n# note\n\n" + line + "\nLATER=1\n")
    assert info.value.line == 5


def test_a_large_env_file_with_an_unclosed_quote_is_one_coded_error() -> None:
    with pytest.raises(EnvSyntaxError) as info:
        parse_env('OK=1\nA="' + 'x \\" ' * 100_000)
    assert info.value.line == 2


def test_env_file_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("A=env\nB=env\nC=env\nSET_IN_SHELL=file\n")
    (tmp_path / ".env.local").write_text("B=local\nC=local\n")
    extra = tmp_path / "extra.env"
    extra.write_text("C=extra\n")
    monkeypatch.setenv("SET_IN_SHELL", "shell")
    env = load_env_files(tmp_path, [extra], Collector())
    assert env == {"A": "env", "B": "local", "C": "extra"}


def test_missing_env_file_flag_is_an_error(tmp_path: Path) -> None:
    collector = Collector()
    assert load_env_files(tmp_path, [tmp_path / "nope.env"], collector) == {}
    assert [d.code for d in collector.errors] == [E.E_CONFIG_NOT_FOUND]


def test_bad_env_file_line_is_reported(tmp_path: Path) -> None:
    write_bundle(tmp_path, VALID_TAIL)
    (tmp_path / ".env").write_text("A=1\nnot a line\n")
    report = inspect_bundle(tmp_path, packages=[])
    assert [(d.code, d.path) for d in report.errors] == [
        (E.E_CONFIG_PARSE_ERROR, f"{tmp_path / '.env'}:2")
    ]


def test_env_value_from_dotenv_never_overrides_environ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_bundle(tmp_path, VALID_TAIL + MODEL_WITH_KEY)
    (tmp_path / ".env").write_text("GOONDAN_TEST_KEY=from-file\n")
    monkeypatch.delenv("GOONDAN_TEST_KEY", raising=False)
    bundle = load_bundle(tmp_path, packages=[])
    api_key = bundle.model("gpt").spec.api_key
    assert bundle.env == {"GOONDAN_TEST_KEY": "from-file"}
    assert resolve_value(bundle, api_key) == "from-file"
    assert "from-file" in bundle.secret_values

    monkeypatch.setenv("GOONDAN_TEST_KEY", "from-shell")
    bundle = load_bundle(tmp_path, packages=[])
    assert bundle.env == {}
    assert resolve_value(bundle, api_key) == "from-shell"
    assert bundle.secret_values == frozenset({"from-shell"})


def test_unset_env_is_a_warning_then_strict_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GOONDAN_TEST_KEY", raising=False)
    write_bundle(tmp_path, VALID_TAIL + MODEL_WITH_KEY)
    report = inspect_bundle(tmp_path, packages=[])
    assert report.valid
    assert [(d.code, d.path) for d in report.warnings] == [
        (E.E_CONFIG_VALUE_SOURCE, "goondan.yaml:33 spec.apiKey")
    ]
    assert "GOONDAN_TEST_KEY" in report.warnings[0].message
    with pytest.raises(BundleError) as info:
        load_bundle(tmp_path, packages=[], strict=True)
    assert info.value.codes == [E.E_CONFIG_VALUE_SOURCE]
    bundle = report.bundle
    assert bundle is not None
    with pytest.raises(BundleError) as runtime_error:
        resolve_value(bundle, bundle.model("gpt").spec.api_key, where="Model/gpt apiKey")
    diag = runtime_error.value.diagnostics[0]
    assert (diag.code, diag.path) == (E.E_CONFIG_VALUE_SOURCE, "Model/gpt apiKey")
    assert diag.suggestion is not None
    assert "export GOONDAN_TEST_KEY=" in diag.suggestion


def test_secret_ref(tmp_path: Path) -> None:
    write_bundle(tmp_path / "b", VALID_TAIL)
    bundle = load_bundle(tmp_path / "b", packages=[])
    state = tmp_path / "state"
    (state / "secrets").mkdir(parents=True)
    (state / "secrets" / "openai.json").write_text(json.dumps({"api_key": "sk-secret"}))
    vs = ValueSource(value_from=ValueFrom(secret_ref=SecretRef(ref="Secret/openai", key="api_key")))
    assert resolve_value(bundle, vs, state_root=state) == "sk-secret"
    missing = ValueSource(value_from=ValueFrom(secret_ref=SecretRef(ref="Secret/openai", key="x")))
    with pytest.raises(BundleError) as info:
        resolve_value(bundle, missing, state_root=state)
    assert info.value.codes == [E.E_CONFIG_VALUE_SOURCE]
    bad = ValueSource(value_from=ValueFrom(secret_ref=SecretRef(ref="Vault/x", key="k")))
    with pytest.raises(BundleError):
        resolve_value(bundle, bad, state_root=state)


@pytest.mark.parametrize(
    "api_key",
    [
        "{}",
        "{valueFrom: {}}",
        "{valueFrom: {env: A, secretRef: {ref: Secret/a, key: k}}}",
        "{valueFrom: {secretRef: {ref: a/b, key: k}}}",
    ],
)
def test_value_source_shapes(tmp_path: Path, api_key: str) -> None:
    write_bundle(
        tmp_path,
        VALID_TAIL
        + MODEL_WITH_KEY.replace("\n    valueFrom:\n      env: GOONDAN_TEST_KEY", f" {api_key}"),
    )
    report = inspect_bundle(tmp_path, packages=[])
    assert [(d.code, d.path) for d in report.errors] == [
        (E.E_CONFIG_VALUE_SOURCE, "goondan.yaml:33 spec.apiKey")
    ]


def test_connection_secrets_are_collected_and_its_config_is_not(tmp_path: Path) -> None:
    (tmp_path / "conn.py").write_text("")
    write_bundle(
        tmp_path,
        VALID_TAIL
        + """
---
apiVersion: goondan.ai/v1
kind: Connector
metadata:
  name: http
spec:
  entry: ./conn.py
  events: [{name: message}]
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: http-to-s
spec:
  connectorRef: Connector/http
  swarmRef: Swarm/s
  config:
    PORT: "8080"
    HOST: {value: 127.0.0.1}
  secrets:
    TOKEN: {value: tok-123}
  ingress:
    rules:
      - match: {event: message}
        route: {agentRef: Agent/main}
""",
    )
    bundle = load_bundle(tmp_path, packages=[])
    assert bundle.secret_values == frozenset({"tok-123"})  # HOST is no secret
