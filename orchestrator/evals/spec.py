"""The eval file: YAML parsed into typed structs, every error at once with its line."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from protocol.errors import ErrorCode

EVALUATORS = frozenset(
    {"equals", "contains", "regex", "jsonSchema", "maxTokens", "maxLatencyMs", "maxSteps",
     "toolCalled", "toolNotCalled", "judge"}
)  # fmt: skip
CASE_FIELDS = frozenset({"name", "input", "inputs", "expect", "agent", "answers"})
TOP_FIELDS = frozenset({"agent", "cases"})
MAX_FILE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class EvalError:
    line: int
    message: str
    code: ErrorCode = ErrorCode.E_EVAL_INVALID

    def __str__(self) -> str:
        return f"line {self.line}: {self.code}: {self.message}"


class EvalFileError(Exception):
    def __init__(self, path: Path, errors: list[EvalError]) -> None:
        super().__init__(f"{path}: {len(errors)} error(s)")
        self.path, self.errors = path, errors


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    inputs: tuple[str, ...]
    expect: dict[str, Any]
    agent: str | None = None
    answers: dict[str, Any] = field(default_factory=dict)
    line: int = 0


@dataclass(frozen=True, slots=True)
class EvalFile:
    cases: tuple[Case, ...]
    agent: str | None = None


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _mapping(node: yaml.Node) -> dict[str, yaml.Node] | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    return {str(k.value): v for k, v in node.value if isinstance(k, yaml.ScalarNode)}


def _value(node: yaml.Node) -> Any:
    return yaml.safe_load(yaml.serialize(node))


def load(path: Path) -> EvalFile:
    """Raises EvalFileError naming every error with its line."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise EvalFileError(path, [EvalError(0, f"cannot read {path}: {exc.strerror}")]) from exc
    if len(data) > MAX_FILE_BYTES:
        raise EvalFileError(path, [EvalError(0, f"the file is over {MAX_FILE_BYTES} bytes")])
    try:
        root = yaml.compose(data.decode("utf-8", errors="replace"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 0
        raise EvalFileError(path, [EvalError(line, "not valid YAML; fix the syntax")]) from exc
    errors: list[EvalError] = []
    parsed = _file(root, errors)
    if errors or parsed is None:
        raise EvalFileError(path, errors)
    return parsed


def _file(root: yaml.Node | None, errors: list[EvalError]) -> EvalFile | None:
    top = _mapping(root) if root is not None else None
    if root is None or top is None:
        errors.append(
            EvalError(_line(root) if root else 1, "the file must be a mapping with `cases`")
        )
        return None
    for key in top.keys() - TOP_FIELDS:
        errors.append(EvalError(_line(top[key]), f"unknown field `{key}` (known: agent, cases)"))
    agent = _string(top.get("agent"), "agent", errors)
    cases_node = top.get("cases")
    if not isinstance(cases_node, yaml.SequenceNode) or not cases_node.value:
        line = _line(cases_node) if cases_node is not None else _line(root)
        errors.append(EvalError(line, "`cases` must be a non-empty list of cases"))
        return None
    cases = [c for n in cases_node.value if (c := _case(n, errors)) is not None]
    seen: set[str] = set()
    for case in cases:
        if case.name in seen:
            errors.append(EvalError(case.line, f"two cases are named `{case.name}`"))
        seen.add(case.name)
    return EvalFile(cases=tuple(cases), agent=agent)


def _string(node: yaml.Node | None, what: str, errors: list[EvalError]) -> str | None:
    if node is None:
        return None
    if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":str") and node.value:
        return str(node.value)
    errors.append(EvalError(_line(node), f"`{what}` must be a non-empty string"))
    return None


def _inputs(case: dict[str, yaml.Node], line: int, errors: list[EvalError]) -> tuple[str, ...]:
    if ("input" in case) == ("inputs" in case):
        errors.append(EvalError(line, "a case needs exactly one of `input` or `inputs`"))
        return ()
    if "input" in case:
        text = _string(case["input"], "input", errors)
        return (text,) if text is not None else ()
    node = case["inputs"]
    if not isinstance(node, yaml.SequenceNode) or not node.value:
        errors.append(EvalError(_line(node), "`inputs` must be a non-empty list of strings"))
        return ()
    texts = [_string(n, "inputs[]", errors) for n in node.value]
    return tuple(t for t in texts if t is not None)


def _case(node: yaml.Node, errors: list[EvalError]) -> Case | None:
    fields = _mapping(node)
    if fields is None:
        errors.append(EvalError(_line(node), "a case must be a mapping (name, input, expect)"))
        return None
    line = _line(node)
    for key in fields.keys() - CASE_FIELDS:
        errors.append(EvalError(_line(fields[key]), f"unknown case field `{key}`"))
    name = _string(fields.get("name"), "name", errors)
    if "name" not in fields:
        errors.append(EvalError(line, "a case needs a `name`"))
    inputs = _inputs(fields, line, errors)
    expect = _expect(fields.get("expect"), line, errors)
    answers = fields.get("answers")
    answer_map = _value(answers) if answers is not None else {}
    if answers is not None and not isinstance(answer_map, dict):
        errors.append(EvalError(_line(answers), "`answers` must map a method to its result"))
        answer_map = {}
    agent = _string(fields.get("agent"), "agent", errors)
    if name is None or not inputs or expect is None:
        return None
    return Case(name=name, inputs=inputs, expect=expect, agent=agent, answers=answer_map, line=line)


def _expect(node: yaml.Node | None, line: int, errors: list[EvalError]) -> dict[str, Any] | None:
    fields = _mapping(node) if node is not None else None
    if node is None or fields is None or not fields:
        errors.append(EvalError(_line(node) if node else line, "`expect` must map evaluators"))
        return None
    out: dict[str, Any] = {}
    for key, value in fields.items():
        problem = _check(key, _value(value))
        if problem is not None:
            errors.append(EvalError(_line(value), problem))
        else:
            out[key] = _value(value)
    return out


def _check(kind: str, value: Any) -> str | None:
    """Why `kind: value` is not a valid evaluator (None: it is)."""
    if kind not in EVALUATORS:
        return f"unknown evaluator `{kind}` (known: {', '.join(sorted(EVALUATORS))})"
    if kind in ("equals", "contains", "regex") and not isinstance(value, str):
        return f"`{kind}` takes a string"
    if kind == "regex":
        try:
            re.compile(value)
        except re.error as exc:
            return f"`regex` does not compile: {exc.msg}"
    if kind == "jsonSchema" and not isinstance(value, dict):
        return "`jsonSchema` takes a JSON Schema object"
    if kind in ("toolCalled", "toolNotCalled"):
        return _check_tool(kind, value)
    if kind == "judge":
        return _check_judge(value)
    if kind.startswith("max") and (
        not isinstance(value, int) or isinstance(value, bool) or value <= 0
    ):
        return f"`{kind}` takes a positive integer"
    return None


def _check_tool(kind: str, value: Any) -> str | None:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return f"`{kind}` takes {{name: TOOL, args: {{...}}}} (args optional, a subset match)"
    if value.keys() - {"name", "args"}:
        return f"`{kind}` knows only `name` and `args`"
    if "args" in value and not isinstance(value["args"], dict):
        return f"`{kind}.args` must be a mapping"
    return None


MODEL_REF = re.compile(r"^(Model/)?[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def _check_judge(value: Any) -> str | None:
    shape = "`judge` takes {rubric: TEXT, model: Model/NAME}"
    if not isinstance(value, dict) or value.keys() != {"rubric", "model"}:
        return shape
    if not isinstance(value["rubric"], str) or not value["rubric"].strip():
        return f"{shape}: the rubric must be a non-empty string"
    if not isinstance(value["model"], str) or not MODEL_REF.match(value["model"]):
        return f"{shape}: `model` must name a Model of the bundle (Model/NAME)"
    return None
