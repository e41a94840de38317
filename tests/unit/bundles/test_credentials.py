"""What a bundle marks as a secret: the credential-name rule, the walk of free-form settings,
their one-time resolution, and the bundle's secret set (a port from the environment is not)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bundles.credentials import (
    credential_env_key,
    is_credential_list_name,
    is_credential_name,
    resolve_settings,
    settings,
    value_source,
)
from bundles.kinds import ValueSource
from bundles.loader import load_bundle
from tests.unit.bundles.conftest import VALID_TAIL, write_bundle

CREDENTIALS = [
    "token", "botToken", "bot_token", "BOT_TOKEN", "apiKey", "api_key", "APIKEY", "APIKey",
    "OPENAI_API_KEY", "X-Api-Key", "x-api-key", "signingSecret", "clientSecret", "password",
    "DB_PASSWD", "passphrase", "Authorization", "Proxy-Authorization", "X-Auth-Token",
    "basicAuth", "Cookie", "privateKey", "accessKey", "GITHUB_PERSONAL_ACCESS_TOKEN",
    "credentials", "refreshToken",
]  # fmt: skip
ORDINARY = [
    "maxTokens", "tokenEnv", "tokenLimit", "instanceKey", "key", "port", "host", "apiBaseUrl",
    "keyProperty", "authMode", "secretRef", "passwordPolicy", "monkey", "TOKENS", "",
    "Content-Type",
]  # fmt: skip


@pytest.mark.parametrize("name", CREDENTIALS)
def test_credential_names(name: str) -> None:
    assert is_credential_name(name)


@pytest.mark.parametrize("name", ORDINARY)
def test_ordinary_names(name: str) -> None:
    assert not is_credential_name(name)


@pytest.mark.parametrize(
    ("key", "target"),
    [("tokenEnv", "token"), ("apiKeyEnv", "apiKey"), ("bot_token_env", "bot_token"),
     ("SIGNING_SECRET_ENV", "SIGNING_SECRET"), ("portEnv", None), ("env", None),
     ("token", None), ("tokenEnvironment", None)],
)  # fmt: skip
def test_credential_env_key(key: str, target: str | None) -> None:
    assert credential_env_key(key) == target


@pytest.mark.parametrize(
    ("raw", "is_source"),
    [({"value": "x"}, True), ({"valueFrom": {"env": "X"}}, True),
     ({"valueFrom": {"secretRef": {"ref": "Secret/a", "key": "k"}}}, True),
     ({"valueFrom": {}}, False), ({"value": 3}, False), ({"value": "x", "other": 1}, False),
     ({"valueFrom": {"env": "X", "secretRef": {"ref": "Secret/a", "key": "k"}}}, False),
     ("plain", False), ({"headers": {}}, False)],
)  # fmt: skip
def test_value_source_shape(raw: object, is_source: bool) -> None:
    assert (value_source(raw) is not None) is is_source


def test_settings_walks_nested_maps_and_lists() -> None:
    config = {
        "token": "inline-token",
        "port": {"valueFrom": {"env": "PORT"}},
        "headers": {"X-Api-Key": {"value": "hdr"}, "Accept": "json"},
        "servers": [{"password": "pw-1"}, "skip"],
        "tokenEnv": "BOT_VAR",
        "cert": {"valueFrom": {"secretRef": {"ref": "Secret/tls", "key": "pem"}}},
        "maxTokens": 5,
    }
    found = {item.path: item for item in settings(config)}
    assert set(found) == {
        ("token",), ("port",), ("headers", "X-Api-Key"), ("servers", 0, "password"),
        ("tokenEnv",), ("cert",),
    }  # fmt: skip
    secret = {path for path, item in found.items() if item.secret}
    assert secret == set(found) - {("port",)}  # a port from the environment is no secret
    assert found[("token",)].literal == "inline-token"
    assert found[("tokenEnv",)].optional and not found[("token",)].optional


@pytest.mark.parametrize(
    ("name", "credential"),
    [("tokens", True), ("apiKeys", True), ("signingSecrets", True), ("token", True),
     ("hosts", False), ("keys", False), ("maxTokens", True)],
)  # fmt: skip
def test_a_list_under_a_plural_credential_name_holds_credentials(
    name: str, credential: bool
) -> None:
    """Rotation lists (`tokens: [a, b]`) are credentials; the rule applies to lists only, so
    `maxTokens: 512` stays an ordinary number (`is_credential_name`)."""
    assert is_credential_list_name(name) is credential


def test_settings_finds_each_credential_in_a_rotation_list() -> None:
    config = {"tokens": [{"valueFrom": {"env": "T1"}}, "inline"], "hosts": ["a", {"value": "b"}]}
    found = {item.path: item.secret for item in settings(config)}
    assert found == {("tokens", 0): True, ("tokens", 1): True, ("hosts", 1): False}


def test_resolve_settings_reads_once_and_keeps_what_has_no_value() -> None:
    env = {"BOT_VAR": "tok-from-env", "PORT": "8794"}

    def lookup(vs: ValueSource) -> str | None:
        if vs.value is not None:
            return vs.value
        assert vs.value_from is not None and vs.value_from.env is not None
        return env.get(vs.value_from.env)

    config = {
        "tokenEnv": "BOT_VAR",
        "port": {"valueFrom": {"env": "PORT"}},
        "missing": {"valueFrom": {"env": "NOPE"}},
        "nested": [{"apiKey": {"value": "k1"}}],
        "plain": 1,
    }
    resolved = resolve_settings(config, lookup)
    assert resolved == {
        "tokenEnv": "BOT_VAR", "token": "tok-from-env", "port": "8794",
        "missing": {"valueFrom": {"env": "NOPE"}}, "nested": [{"apiKey": "k1"}], "plain": 1,
    }  # fmt: skip
    assert config["port"] == {"valueFrom": {"env": "PORT"}}  # the original is untouched
    explicit = {"tokenEnv": "BOT_VAR", "token": "given"}
    assert resolve_settings(explicit, lookup) is explicit  # an explicit token wins
    untouched = {"maxTokens": 3, "roots": ["."]}
    assert resolve_settings(untouched, lookup) is untouched


TOOL_AND_CONNECTION = """
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: chat}
spec:
  entry: ./tool.py
  exports: [{name: send}]
  config:
    tokenEnv: CHAT_BOT_VAR
    port: {valueFrom: {env: HOOK_PORT}}
    headers: {Authorization: "Bearer inline-bearer"}
    mcpish: {valueFrom: {secretRef: {ref: Secret/files, key: any}}}
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: remote}
spec:
  mcp:
    command: server
    env:
      GITHUB_TOKEN: {valueFrom: {env: GH_VAR}}
      LOG_LEVEL: {valueFrom: {env: HOOK_PORT}}
      INLINE_SECRET: inline-mcp
---
apiVersion: goondan.ai/v1
kind: Connector
metadata: {name: hook}
spec:
  entry: ./conn.py
  config: {signingSecret: connector-inline}
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: hook}
spec:
  connectorRef: Connector/hook
  config:
    port: {valueFrom: {env: HOOK_PORT}}
    botToken: {valueFrom: {env: CONN_VAR}}
  secrets:
    anything: {value: conn-secret}
"""


def test_bundle_secrets_are_what_the_bundle_marks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("tool.py", "conn.py"):
        (tmp_path / name).write_text("handlers = {}\n")
    state = tmp_path / "state"
    (state / "secrets").mkdir(parents=True)
    (state / "secrets" / "files.json").write_text(json.dumps({"any": "from-secret-file"}))
    env = {"CHAT_BOT_VAR": "chat-token", "HOOK_PORT": "8794", "GH_VAR": "gh-token",
           "CONN_VAR": "conn-token", "GOONDAN_TEST_KEY": "model-key"}  # fmt: skip
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    model = """
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: keyed}
spec: {provider: openai, model: m, apiKey: {valueFrom: {env: GOONDAN_TEST_KEY}}}
"""
    write_bundle(tmp_path, VALID_TAIL + TOOL_AND_CONNECTION + model)
    bundle = load_bundle(tmp_path, packages=[], state_root=state)
    assert bundle.secret_values == {
        "chat-token", "Bearer inline-bearer", "from-secret-file", "gh-token", "inline-mcp",
        "connector-inline", "conn-token", "conn-secret", "model-key",
    }  # fmt: skip
    assert "8794" not in bundle.secret_values


def test_credentials_an_agent_gives_a_tool_by_overrides_are_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`overrides: {spec: {config: {tokenEnv: X}}}` on an agent's tool reference."""
    (tmp_path / "tool.py").write_text("handlers = {}\n")
    monkeypatch.setenv("CHAT_BOT_VAR", "chat-token")
    monkeypatch.setenv("OTHER_VAR", "other-token")
    tool = """
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: chat}
spec:
  entry: ./tool.py
  exports: [{name: send}]
  config: {tokenEnv: CHAT_BOT_VAR}
"""
    agent = VALID_TAIL.replace(
        "    modelRef: Model/fake\n",
        "    modelRef: Model/fake\n  tools:\n"
        "    - {ref: Tool/chat, overrides: {spec: {config: {tokenEnv: OTHER_VAR}}}}\n",
    )
    write_bundle(tmp_path, agent + tool)
    bundle = load_bundle(tmp_path, packages=[])
    assert bundle.secret_values == {"chat-token", "other-token"}
