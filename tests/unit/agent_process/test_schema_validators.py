"""The compiled validators of a schema are memoized by content: shared, same answers."""

from __future__ import annotations

import os
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from agent_process import schema
from agent_process.schema import ArgsValidator, SchemaInvalid
from bundles.sdk import ToolFailed

VALID = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
INVALID = {"type": "object", "properties": {"n": {"type": "no-such-type"}}}


def _count_compiles(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Counts compiles of the fast validator (the reference one is built beside it)."""
    calls: list[Any] = []
    real = schema._FAST or Draft202012Validator

    def counting(s: Any) -> Any:
        calls.append(s)
        return real(s)

    monkeypatch.setattr(schema, "_FAST", counting)
    monkeypatch.setattr(schema, "_validators", {})
    monkeypatch.setattr(schema, "_verdicts", {})
    return calls


def test_equal_schemas_share_the_compiled_validators(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_compiles(monkeypatch)
    reordered = {"required": ["path"], "properties": {"path": {"type": "string"}}, "type": "object"}
    a = ArgsValidator("a__x", VALID)
    b = ArgsValidator("b__y", dict(reordered))
    assert len(calls) == 1
    assert a._reference is b._reference and a._fast is b._fast
    assert b.schema is not a.schema  # each keeps its own schema for its report
    a.validate({"path": "p"})
    with pytest.raises(ToolFailed) as failed:
        b.validate({"path": 3})
    assert failed.value.message.startswith("invalid arguments for b__y:")  # its own name
    assert "\n- at $.path: " in failed.value.message  # then jsonschema's words


def test_an_invalid_schema_fails_the_same_way_and_compiles_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _count_compiles(monkeypatch)
    messages = []
    for _ in range(2):
        with pytest.raises(SchemaInvalid, match="properties/n/type") as exc:
            ArgsValidator("t__x", INVALID)
        messages.append(str(exc.value))
    assert messages[0] == messages[1]
    assert calls == [] and schema._validators == {}


def test_warm_compiles_so_a_later_validator_compiles_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _count_compiles(monkeypatch)
    schema.warm([VALID, INVALID])
    assert len(calls) == 1 and len(schema._validators) == 1
    ArgsValidator("t__ok", VALID).validate({"path": "p"})
    with pytest.raises(SchemaInvalid):
        ArgsValidator("t__bad", INVALID)
    assert len(calls) == 1


def test_the_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    _count_compiles(monkeypatch)
    monkeypatch.setattr(schema, "MAX_REMEMBERED_SCHEMAS", 3)
    for i in range(7):
        ArgsValidator("t__x", {"type": "object", "maxProperties": i})
    assert 1 <= len(schema._validators) <= 3


def test_a_validator_compiled_before_a_fork_works_in_the_child(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _count_compiles(monkeypatch)
    schema.warm([VALID])  # as the fork server does
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's verdict is its exit status
        v = ArgsValidator("t__x", VALID)
        ok = v._fast.is_valid({"path": "p"}) and not v._fast.is_valid({"path": 1})
        os._exit(0 if ok and len(schema._validators) == 1 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
