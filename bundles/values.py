"""ValueSource: a setting given inline (`value`), from the environment (`valueFrom.env`) or from a
secret file (`valueFrom.secretRef: {ref: Secret/<name>, key}` ->
`<state_root>/secrets/<name>.json`). Exactly one of the three.

Environment lookups read the process environment first, then the bundle's `.env` files
(`Bundle.env`), so a variable exported in the shell always wins.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from bundles.diagnostics import BundleError, single
from bundles.kinds import ValueSource
from bundles.model import Bundle
from bundles.naming import NAME_PATTERN
from protocol.endpoints import default_state_root
from protocol.errors import ErrorCode

MAX_SECRET_FILE_BYTES = 1024 * 1024


class ValueProblem(Exception):
    def __init__(self, message: str, suggestion: str, *, missing: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.suggestion = suggestion
        self.missing = missing
        """True when the shape is right but the value is not available (yet): env/secret."""


def shape_problem(vs: ValueSource) -> ValueProblem | None:
    """Exactly one of value / valueFrom.env / valueFrom.secretRef, and a `Secret/<name>` ref."""
    env = vs.value_from.env if vs.value_from else None
    secret = vs.value_from.secret_ref if vs.value_from else None
    count = sum(x is not None for x in (vs.value, env, secret))
    if count != 1:
        found = "none" if count == 0 else "more than one"
        return ValueProblem(
            f"a value source needs exactly one of value, valueFrom.env, valueFrom.secretRef "
            f"({found} given)",
            "keep only one, e.g. `valueFrom: {env: MY_API_KEY}`",
        )
    if env is not None and not env:
        return ValueProblem("valueFrom.env names no variable", "write the variable name")
    if secret is not None:
        kind, _, name = secret.ref.partition("/")
        if kind != "Secret" or not NAME_PATTERN.match(name):
            return ValueProblem(
                f"secretRef.ref {secret.ref!r} must be `Secret/<name>`",
                "write e.g. `ref: Secret/openai` for <state_root>/secrets/openai.json",
            )
    return None


def _read_secret(name: str, key: str, state_root: Path) -> str:
    file = state_root / "secrets" / f"{name}.json"
    fix = f'write {{"{key}": "..."}} to {file}'
    try:
        raw = file.read_bytes()[:MAX_SECRET_FILE_BYTES]
    except OSError:
        raise ValueProblem(f"secret file {file} does not exist", fix, missing=True) from None
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ValueProblem(f"secret file {file} is not valid JSON", fix) from None
    if not isinstance(data, dict) or key not in data:
        raise ValueProblem(f"secret {name} has no key {key!r}", fix, missing=True)
    value = data[key]
    if isinstance(value, dict | list) or value is None:
        raise ValueProblem(f"secret {name} key {key!r} is not a string", fix)
    return str(value)


def value_of(bundle: Bundle, vs: ValueSource, *, state_root: Path | None = None) -> str:
    """The value, or `ValueProblem` saying what is wrong or what to set."""
    problem = shape_problem(vs)
    if problem is not None:
        raise problem
    if vs.value is not None:
        return vs.value
    assert vs.value_from is not None
    if vs.value_from.env is not None:
        name = vs.value_from.env
        found = os.environ.get(name, bundle.env.get(name))
        if found is None:
            raise ValueProblem(
                f"environment variable {name} is not set",
                f"export {name}=... or add {name}=... to .env next to {bundle.path.name}",
                missing=True,
            )
        return found
    secret = vs.value_from.secret_ref
    assert secret is not None
    root = state_root if state_root is not None else default_state_root()
    return _read_secret(secret.ref.partition("/")[2], secret.key, root)


def resolve_value(
    bundle: Bundle, vs: ValueSource, *, state_root: Path | None = None, where: str = ""
) -> str:
    """The value of `vs`; a coded E_CONFIG_VALUE_SOURCE `BundleError` naming what to set.

    `where` (e.g. `Model/gpt spec.apiKey`) is used as the diagnostic's path.
    """
    try:
        return value_of(bundle, vs, state_root=state_root)
    except ValueProblem as problem:
        raise single(
            ErrorCode.E_CONFIG_VALUE_SOURCE,
            problem.message,
            where or str(bundle.path.name),
            problem.suggestion,
        ) from None


__all__ = ["BundleError", "ValueProblem", "resolve_value", "shape_problem", "value_of"]
