"""What a bundle marks as a secret: the one rule for credential-like names, and the walk of a
resource's free-form settings that finds its credentials. Pure: nothing here reads a value.

A secret is
- any value read through `valueFrom.secretRef`, wherever it is;
- the value of a field that is a credential by kind: a Model's `apiKey`, a Connection's
  `spec.secrets`;
- a value under a credential-like name (`is_credential_name`) in a Tool, Extension, Connector or
  Connection `config`, or in an MCP server's `env` or `headers`: written inline, or given as a
  ValueSource (`{value: ...}`, `{valueFrom: {env: NAME}}`);
- the value of the environment variable that a `<credential>Env` key names (`tokenEnv:
  TELEGRAM_BOT_TOKEN`).

Nothing else is: a port read from `valueFrom.env` is an ordinary value and is never masked.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from bundles.diagnostics import FieldPath
from bundles.kinds import ValueFrom, ValueSource

_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_LAST_WORDS = frozenset(
    {
        "token", "secret", "password", "passwd", "passphrase", "credential", "credentials",
        "authorization", "auth", "cookie", "apikey", "bearer",
    }
)  # fmt: skip
_KEY_PAIRS = frozenset({"api", "private", "access", "secret", "signing", "auth", "client"})
"""`<word> key` is a credential for these words: apiKey, X-Api-Key, privateKey, accessKey."""
_PLURALS = {
    "tokens": "token", "secrets": "secret", "passwords": "password", "cookies": "cookie",
    "keys": "key", "apikeys": "apikey",
}  # fmt: skip
_ENV_SUFFIX = re.compile(r"[_-]?env$", re.IGNORECASE)


def _words(name: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(name)]


def _credential_words(words: list[str]) -> bool:
    if not words:
        return False
    if words[-1] in _LAST_WORDS:
        return True
    return len(words) >= 2 and words[-1] == "key" and words[-2] in _KEY_PAIRS


def is_credential_name(name: str) -> bool:
    """Whether a setting, header or variable named `name` holds a credential: its last word is
    token, secret, password, credential(s), auth(orization), cookie or bearer, or it ends in
    api/private/access/secret/signing/auth/client key. camelCase, snake_case, kebab-case and
    UPPER_CASE are all split into words: `botToken`, `X-Api-Key`, `OPENAI_API_KEY` are
    credentials; `maxTokens`, `instanceKey`, `tokenEnv` are not."""
    return _credential_words(_words(name))


def is_credential_list_name(name: str) -> bool:
    """Whether a list named `name` holds credentials: a credential name, or the plural of one
    (`tokens: [...]`, `apiKeys: [...]`, rotation lists). Only for lists: `maxTokens: 512` is a
    number, never a credential."""
    words = _words(name)
    if words and words[-1] in _PLURALS:
        words = [*words[:-1], _PLURALS[words[-1]]]
    return _credential_words(words)


def credential_env_key(name: str) -> str | None:
    """For a key that names the environment variable holding a credential (`tokenEnv`,
    `apiKeyEnv`, `bot_token_env`): the credential's own key (`token`, `apiKey`); else None."""
    words = _words(name)
    if len(words) < 2 or words[-1] != "env" or not _credential_words(words[:-1]):
        return None
    return _ENV_SUFFIX.sub("", name)


def value_source(raw: Any) -> ValueSource | None:
    """`raw` as a ValueSource when it has exactly that shape (`{value: "..."}`, `{valueFrom:
    {env: NAME}}`, `{valueFrom: {secretRef: {ref, key}}}`), else None."""
    if not isinstance(raw, Mapping) or len(raw) != 1:
        return None
    try:
        vs = msgspec.convert(dict(raw), ValueSource)
    except msgspec.ValidationError:
        return None
    vf = vs.value_from
    one = vs.value is not None or (vf is not None and (vf.env is None) != (vf.secret_ref is None))
    return vs if one else None


def is_secret_ref(vs: ValueSource) -> bool:
    return vs.value_from is not None and vs.value_from.secret_ref is not None


@dataclass(frozen=True, slots=True)
class Setting:
    """One value of a free-form settings map that is a ValueSource or a credential."""

    path: FieldPath
    """Inside the map, e.g. ("headers", "Authorization")."""
    secret: bool
    literal: str | None = None
    """Written inline (then `source` is None)."""
    source: ValueSource | None = None
    optional: bool = False
    """A variable named by a `<credential>Env` key: its absence is the tool's business."""


def settings(config: Mapping[str, Any], path: FieldPath = ()) -> Iterator[Setting]:
    """Every ValueSource-shaped value of `config` (at any depth), every string under a
    credential-like name, and every variable a `<credential>Env` key names."""
    for key, raw in config.items():
        here = (*path, key)
        credential = is_credential_name(key)
        vs = value_source(raw)
        if vs is not None:
            yield Setting(here, credential or is_secret_ref(vs), source=vs)
        elif isinstance(raw, str) and credential:
            yield Setting(here, True, literal=raw)
        elif isinstance(raw, str) and raw and credential_env_key(key) is not None:
            env = ValueSource(value_from=ValueFrom(env=raw))
            yield Setting(here, True, source=env, optional=True)
        elif isinstance(raw, Mapping):
            yield from settings(raw, here)
        elif isinstance(raw, list):
            yield from _listed(raw, here, is_credential_list_name(key))


def _listed(items: list[Any], path: FieldPath, credential: bool) -> Iterator[Setting]:
    for i, item in enumerate(items):
        at = (*path, i)
        vs = value_source(item)
        if vs is not None:
            yield Setting(at, credential or is_secret_ref(vs), source=vs)
        elif isinstance(item, str) and credential:
            yield Setting(at, True, literal=item)
        elif isinstance(item, Mapping):
            yield from settings(item, at)


Lookup = Callable[[ValueSource], "str | None"]
"""The value of a ValueSource, or None when it has none (a variable that is not set)."""


def resolve_settings(config: Mapping[str, Any], lookup: Lookup) -> Mapping[str, Any]:
    """`config` with its credentials read now, once: every ValueSource-shaped value replaced by
    its value (kept as written when it has none), and for each `<credential>Env: NAME` whose
    credential key is not set, that key set to the variable's value (`tokenEnv: X` gives
    `token`). Returns `config` itself when nothing changed."""
    out: dict[str, Any] = {}
    changed = False
    for key, raw in config.items():
        value = _resolved(raw, lookup)
        changed = changed or value is not raw
        out[key] = value
    for key, raw in config.items():
        target = credential_env_key(key)
        if target is None or target in config or not isinstance(raw, str) or not raw:
            continue
        found = lookup(ValueSource(value_from=ValueFrom(env=raw)))
        if found is not None:
            out[target] = found
            changed = True
    return out if changed else config


def _resolved(raw: Any, lookup: Lookup) -> Any:
    vs = value_source(raw)
    if vs is not None:
        found = lookup(vs)
        return raw if found is None else found
    if isinstance(raw, Mapping):
        return resolve_settings(raw, lookup)
    if isinstance(raw, list):
        items = [_resolved(item, lookup) for item in raw]
        return items if any(a is not b for a, b in zip(items, raw, strict=True)) else raw
    return raw
