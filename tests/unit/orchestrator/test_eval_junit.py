"""`goondan eval --junit` against the JUnit schema CI readers accept
(tests/fixtures/junit/junit.xsd: Jenkins' junit-10 / the windyroad JUnit.xsd shape), and the
schema refusing what they refuse."""

from __future__ import annotations

from pathlib import Path

import pytest
import xmlschema

from orchestrator.evals.report import write_junit
from orchestrator.evals.runner import Result

SCHEMA = Path(__file__).parents[2] / "fixtures" / "junit" / "junit.xsd"


@pytest.fixture(scope="module")
def schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(SCHEMA)


def _result(case: str, passed: bool, repeat: int = 0, cost: float | None = None) -> Result:
    return Result(case=case, repeat=repeat, instance_key=f"eval-{case}-{repeat}", passed=passed,
                  evaluator=None if passed else "contains",
                  why=None if passed else 'the reply has no "Hello" <&>', tokens=12,
                  latency_ms=12.5, trace_id="ab" * 16, cost_usd=cost)  # fmt: skip


def test_a_report_of_passes_failures_repeats_and_costs_validates(
    tmp_path: Path, schema: xmlschema.XMLSchema
) -> None:
    results = [
        _result("greets", True, cost=0.25),
        _result("refuses", False, cost=0.5),
        *(_result("flaky", k % 2 == 0, repeat=k, cost=0.125) for k in range(3)),
        _result("unpriced", True),
    ]
    path = tmp_path / "junit.xml"
    write_junit(path, results, "evals.yaml")
    schema.validate(path)
    suite = schema.to_dict(path)["testsuite"][0]
    names = [c["@name"] for c in suite["testcase"]]
    assert names == ["greets", "refuses", "flaky", "flaky #2", "flaky #3", "unpriced"]
    props = {p["@name"] for p in suite["properties"]["property"]}
    assert props == {"costUsd:greets", "costUsd:refuses", "costUsd:flaky", "costUsd:flaky #2",
                     "costUsd:flaky #3"}  # fmt: skip


@pytest.mark.parametrize("results", [[], [_result("unpriced", True)]], ids=["empty", "no cost"])
def test_a_run_without_costs_has_no_empty_properties(
    tmp_path: Path, schema: xmlschema.XMLSchema, results: list[Result]
) -> None:
    path = tmp_path / "junit.xml"
    write_junit(path, results, "evals.yaml")
    schema.validate(path)  # an empty <properties/> is invalid: it needs one property at least


BAD = [
    # properties belong to a testsuite; strict readers refuse them on a testcase
    '<testsuite name="s" tests="1"><testcase name="c"><properties>'
    '<property name="a" value="1"/></properties></testcase></testsuite>',
    '<testsuite name="s" tests="1"><testcase classname="s"/></testsuite>',  # no name
    '<testsuite tests="1"><testcase name="c"/></testsuite>',  # a suite without a name
    '<testsuite name="s" tests="-1"/>',  # a negative count
    '<testsuite name="s" tests="1"><testcase name="c" time="soon"/></testsuite>',
    # properties after the cases: the order is fixed
    '<testsuite name="s" tests="1"><testcase name="c"/><properties>'
    '<property name="a" value="1"/></properties></testsuite>',
    '<testsuite name="s" tests="1"><properties><property name="a"/></properties></testsuite>',
]


@pytest.mark.parametrize("document", BAD)
def test_the_schema_refuses_what_consumers_refuse(
    document: str, schema: xmlschema.XMLSchema
) -> None:
    with pytest.raises(xmlschema.XMLSchemaValidationError):
        schema.validate(f"<testsuites>{document}</testsuites>")
