"""The metaschema verdict is memoized by schema content: same answers, checked once."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator

from agent_process import schema
from agent_process.schema import ArgsValidator, SchemaInvalid

VALID = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
INVALID = {"type": "object", "properties": {"n": {"type": "no-such-type"}}}


def _count_checks(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    real = Draft202012Validator.check_schema

    def counting(s: Any) -> None:
        calls.append(s)
        real(s)

    monkeypatch.setattr(Draft202012Validator, "check_schema", staticmethod(counting))
    monkeypatch.setattr(schema, "_verdicts", {})
    return calls


def test_equal_schemas_are_checked_against_the_metaschema_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _count_checks(monkeypatch)
    reordered = {"required": ["path"], "properties": {"path": {"type": "string"}}, "type": "object"}
    ArgsValidator("a__x", VALID)
    ArgsValidator("b__y", dict(reordered))
    assert len(calls) == 1
    ArgsValidator("a__x", VALID).validate({"path": "p"})  # the validator still validates


def test_an_invalid_schema_is_rejected_every_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_checks(monkeypatch)
    for _ in range(2):
        with pytest.raises(SchemaInvalid, match="properties/n/type"):
            ArgsValidator("t__x", INVALID)
    assert len(calls) == 1


def test_warm_remembers_both_verdicts(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_checks(monkeypatch)
    schema.warm([VALID, INVALID])
    ArgsValidator("t__ok", VALID)
    with pytest.raises(SchemaInvalid):
        ArgsValidator("t__bad", INVALID)
    assert len(calls) == 2


def test_a_schema_that_is_not_plain_json_is_still_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _count_checks(monkeypatch)
    odd = {"type": "object", "default": object()}  # no canonical JSON: nothing remembered
    for _ in range(2):
        schema.check_schema(odd)
    assert len(calls) == 2
