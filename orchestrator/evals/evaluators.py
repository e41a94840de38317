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
    tool_calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    """Every tool call of the case's turns: (name, args)."""
    steps: int = 0
    """The most model steps one input of the case took."""


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


def _called(want: dict[str, Any], out: Outcome) -> bool:
    """A call of that name whose args include every key of `want["args"]` with its value."""
    args = want.get("args") or {}
    return any(
        name == want["name"] and all(k in got and got[k] == v for k, v in args.items())
        for name, got in out.tool_calls
    )


def _tool_called(want: dict[str, Any], out: Outcome) -> str | None:
    if _called(want, out):
        return None
    seen = ", ".join(sorted({name for name, _ in out.tool_calls})) or "none"
    return f"{want['name']} was not called with args {want.get('args') or {}} (called: {seen})"


def _tool_not_called(want: dict[str, Any], out: Outcome) -> str | None:
    return f"{want['name']} was called" if _called(want, out) else None


def _max_steps(limit: int, out: Outcome) -> str | None:
    return None if out.steps <= limit else f"{out.steps} steps in one turn > {limit}"


CHECKS: dict[str, Check] = {
    "equals": _equals,
    "contains": _contains,
    "regex": _regex,
    "jsonSchema": _json_schema,
    "maxTokens": _max_tokens,
    "maxLatencyMs": _max_latency,
    "toolCalled": _tool_called,
    "toolNotCalled": _tool_not_called,
    "maxSteps": _max_steps,
}


def evaluate(expect: dict[str, Any], out: Outcome) -> tuple[str, str] | None:
    """The first failing evaluator and why (None: every one passes). A failed turn fails
    every case before any evaluator runs."""
    if out.error is not None:
        return "turn", out.error
    for kind, want in expect.items():
        check = CHECKS.get(kind)  # `judge` is not one: it asks a model (evals/judge.py)
        why = check(want, out) if check is not None else None
        if why is not None:
            return kind, why
    return None
