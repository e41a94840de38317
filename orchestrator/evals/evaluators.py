"""Each evaluator checks one case's outcome: None when it passes, else why it failed."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jsonschema


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a case produced: the last reply's text, the tokens its turns used, its latency."""

    reply: str
    tokens: int | None
    latency_ms: float
    error: str | None = None


Check = Callable[[Any, Outcome], str | None]


def _equals(want: str, out: Outcome) -> str | None:
    return None if out.reply == want else f"the reply is not {want!r}"


def _contains(want: str, out: Outcome) -> str | None:
    return None if want in out.reply else f"the reply does not contain {want!r}"


def _regex(pattern: str, out: Outcome) -> str | None:
    return None if re.search(pattern, out.reply) else f"the reply does not match /{pattern}/"


def _json_schema(schema: dict[str, Any], out: Outcome) -> str | None:
    try:
        value = json.loads(out.reply)
    except ValueError:
        return "the reply is not JSON"
    try:
        jsonschema.Draft202012Validator(schema).validate(value)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        return f"the reply's JSON fails its schema at {where} ({exc.validator})"
    except jsonschema.SchemaError:
        return "the jsonSchema itself is invalid"
    return None


def _max_tokens(limit: int, out: Outcome) -> str | None:
    if out.tokens is None:
        return "the model reported no token usage"
    return None if out.tokens <= limit else f"{out.tokens} tokens > {limit}"


def _max_latency(limit: int, out: Outcome) -> str | None:
    return None if out.latency_ms <= limit else f"{out.latency_ms:.0f} ms > {limit} ms"


CHECKS: dict[str, Check] = {
    "equals": _equals,
    "contains": _contains,
    "regex": _regex,
    "jsonSchema": _json_schema,
    "maxTokens": _max_tokens,
    "maxLatencyMs": _max_latency,
}


def evaluate(expect: dict[str, Any], out: Outcome) -> tuple[str, str] | None:
    """The first failing evaluator and why (None: every one passes). A failed turn fails
    every case before any evaluator runs."""
    if out.error is not None:
        return "turn", out.error
    for kind, want in expect.items():
        why = CHECKS[kind](want, out)
        if why is not None:
            return kind, why
    return None
