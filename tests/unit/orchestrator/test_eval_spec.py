"""The eval file: typed cases, every error at once with its line (orchestrator/evals/spec.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.evals.spec import EvalFileError, load
from protocol.errors import ErrorCode


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "evals.yaml"
    path.write_text(text)
    return path


def test_a_valid_file_parses_into_cases(tmp_path: Path) -> None:
    spec = load(
        _write(
            tmp_path,
            """\
agent: assistant
cases:
  - name: greets
    input: hello
    expect: {contains: Hello}
  - name: two turns
    agent: other
    inputs: [a, b]
    expect: {regex: "b$", maxTokens: 10, maxLatencyMs: 100, jsonSchema: {type: object}}
    answers: {"ui.confirm": {confirmed: false}}
""",
        )
    )
    assert spec.agent == "assistant"
    assert [c.name for c in spec.cases] == ["greets", "two turns"]
    assert spec.cases[1].inputs == ("a", "b")
    assert spec.cases[1].agent == "other"
    assert spec.cases[1].answers == {"ui.confirm": {"confirmed": False}}
    assert spec.cases[0].line == 3


def _errors(tmp_path: Path, text: str) -> list[tuple[int, str]]:
    with pytest.raises(EvalFileError) as caught:
        load(_write(tmp_path, text))
    assert all(e.code is ErrorCode.E_EVAL_INVALID for e in caught.value.errors)
    return [(e.line, e.message) for e in caught.value.errors]


def test_every_error_is_reported_with_its_line(tmp_path: Path) -> None:
    errors = _errors(
        tmp_path,
        """\
cases:
  - name: a
    input: hi
    expect: {contans: Hello}
  - name: b
    expect: {equals: x}
  - name: c
    input: hi
    inputs: [hi]
    expect:
      regex: "("
      maxTokens: -1
  - name: a
    input: x
    expect: {contains: x}
    color: red
""",
    )
    lines = sorted(line for line, _ in errors)
    assert lines == [4, 5, 7, 11, 12, 13, 16]
    text = " ".join(m for _, m in errors)
    assert "contans" in text and "regex" in text and "maxTokens" in text
    assert "`color`" in text and "named `a`" in text


def test_bad_yaml_names_its_line(tmp_path: Path) -> None:
    errors = _errors(tmp_path, "cases:\n  - name: a\n    input: [unclosed\n")
    assert errors[0][0] >= 3


@pytest.mark.parametrize("text", ["[]", "cases: []", "cases: 3", "42"])
def test_a_file_without_cases_is_an_error(tmp_path: Path, text: str) -> None:
    assert _errors(tmp_path, text)


def test_a_missing_file_is_a_coded_error(tmp_path: Path) -> None:
    with pytest.raises(EvalFileError) as caught:
        load(tmp_path / "none.yaml")
    assert caught.value.errors[0].code is ErrorCode.E_EVAL_INVALID


def test_a_tool_evaluator_needs_a_name_and_mapping_args(tmp_path: Path) -> None:
    errors = _errors(
        tmp_path,
        """\
cases:
  - name: a
    input: hi
    expect:
      toolCalled: {args: {x: 1}}
      toolNotCalled: {name: t, args: [1]}
      maxSteps: 0
""",
    )
    assert sorted(line for line, _ in errors) == [5, 6, 7]


def test_a_judge_needs_a_rubric_and_a_model_ref(tmp_path: Path) -> None:
    ok = _write(
        tmp_path,
        "cases:\n  - {name: a, input: x, expect: {judge: {rubric: polite, model: Model/j}}}\n",
    )
    assert load(ok).cases[0].expect["judge"] == {"rubric": "polite", "model": "Model/j"}
    bad = _write(
        tmp_path,
        """\
cases:
  - {name: a, input: x, expect: {judge: {rubric: polite}}}
  - {name: b, input: x, expect: {judge: {rubric: "", model: Model/j}}}
  - {name: c, input: x, expect: {judge: {rubric: r, model: "../../etc"}}}
""",
    )
    with pytest.raises(EvalFileError) as info:
        load(bad)
    assert [e.line for e in info.value.errors] == [2, 3, 4]
    assert {e.code for e in info.value.errors} == {ErrorCode.E_EVAL_INVALID}
