"""The eval report: the table on stdout, JUnit XML for CI, JSON for tools, a compare."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

from orchestrator.evals.runner import Result, as_row


def pass_rates(results: list[Result]) -> dict[str, float]:
    runs: dict[str, list[bool]] = defaultdict(list)
    for r in results:
        runs[r.case].append(r.passed)
    return {case: sum(p) / len(p) for case, p in runs.items()}


def _cost(usd: float | None) -> str:
    """Blank when unknown (a Model without pricing): 0 would claim the case was free."""
    return "" if usd is None else f"{usd:.6f}"


def _total_cost(results: list[Result]) -> float | None:
    costs = [r.cost_usd for r in results]
    return None if not costs or None in costs else sum(c for c in costs if c is not None)


def _properties(suite: ET.Element, results: list[Result]) -> None:
    """Costs as the suite's properties: the common JUnit schema allows `properties` on a
    testsuite, not on a testcase (consumers that validate would refuse it there), and none
    when no case has a cost (the schema wants one `property` at least in a `properties`)."""
    total = _total_cost(results)
    found = [("costUsd", total)] if total is not None else []
    found += [(f"costUsd:{_case_name(r)}", r.cost_usd) for r in results if r.cost_usd is not None]
    if not found:
        return
    props = ET.SubElement(suite, "properties")
    for name, usd in found:
        ET.SubElement(props, "property", name=name, value=f"{usd:.8f}")


def _case_name(r: Result) -> str:
    return r.case if r.repeat == 0 else f"{r.case} #{r.repeat + 1}"


def table(results: list[Result], repeat: int) -> str:
    head = f"{'CASE':<30} {'RESULT':<8} {'TOKENS':>7} {'COST $':>10} {'MS':>7}  {'TRACE':<32}  WHY"
    lines = [head]
    for r in results:
        tokens = "-" if r.tokens is None else str(r.tokens)
        why = f"{r.evaluator}: {r.why}" if not r.passed else ""
        name = r.case if repeat == 1 else f"{r.case} #{r.repeat + 1}"
        verdict = "pass" if r.passed else "FAIL"
        lines.append(f"{name[:30]:<30} {verdict:<8} {tokens:>7} {_cost(r.cost_usd):>10} "
                     f"{r.latency_ms:>7.0f}  "
                     f"{r.trace_id or '-':<32}  {why}")  # fmt: skip
    if repeat > 1:
        lines.append("")
        lines.extend(f"{case}: pass rate {rate:.0%}" for case, rate in pass_rates(results).items())
    failed = sum(not r.passed for r in results)
    total = _total_cost(results)
    spent = f", ${total:.6f}" if total is not None else ""
    lines.append(f"{len(results) - failed} passed, {failed} failed{spent}")
    return "\n".join(lines)


def write_junit(path: Path, results: list[Result], name: str) -> None:
    failed = sum(not r.passed for r in results)
    seconds = sum(r.latency_ms for r in results) / 1000
    suite = ET.Element("testsuite", name=name, tests=str(len(results)), failures=str(failed),
                       errors="0", skipped="0", time=f"{seconds:.3f}")  # fmt: skip
    _properties(suite, results)
    for r in results:
        case = ET.SubElement(suite, "testcase", classname=name,
                             name=r.case if r.repeat == 0 else f"{r.case} #{r.repeat + 1}",
                             time=f"{r.latency_ms / 1000:.3f}")  # fmt: skip
        if not r.passed:
            failure = ET.SubElement(case, "failure", message=f"{r.evaluator}: {r.why}",
                                    type=r.evaluator or "")  # fmt: skip
            failure.text = f"instance {r.instance_key} trace {r.trace_id}"
    root = ET.Element("testsuites", tests=str(len(results)), failures=str(failed))
    root.append(suite)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def as_json(results: list[Result]) -> dict[str, Any]:
    return {"results": [as_row(r) for r in results], "passRates": pass_rates(results)}


def changes(before: object, now: dict[str, float]) -> dict[str, list[dict[str, Any]]]:
    """The cases whose pass rate fell (`regressed`) or rose (`improved`) against `before`, an
    earlier report's `passRates`; cases new or gone are neither."""
    out: dict[str, list[dict[str, Any]]] = {"regressed": [], "improved": []}
    if not isinstance(before, dict):
        return out
    for case, rate in now.items():
        old = before.get(case)
        if isinstance(old, int | float) and not isinstance(old, bool) and old != rate:
            kind = "regressed" if rate < old else "improved"
            out[kind].append({"case": case, "before": old, "now": rate})
    return out


def compare(previous: dict[str, Any], results: list[Result]) -> list[str]:
    """What regressed and what improved against an earlier `--json` report."""
    if not isinstance(previous.get("passRates"), dict):
        return ["--compare: the file has no passRates (not a goondan eval --json report)"]
    found = changes(previous["passRates"], pass_rates(results))
    return [
        f"{kind}: {c['case']} ({c['before']:.0%} -> {c['now']:.0%})"
        for kind in ("regressed", "improved")
        for c in found[kind]
    ]


def summary(results: list[Result]) -> dict[str, Any]:
    """A run in a line: how many case runs, passed, failed, its pass rate and cost."""
    passed = sum(r.passed for r in results)
    return {
        "cases": len(results), "passed": passed, "failed": len(results) - passed,
        "passRate": passed / len(results) if results else None,
        "costUsd": _total_cost(results),
    }  # fmt: skip


def write_json(path: Path, document: dict[str, Any]) -> None:
    """The report `as_json` gives, with what ran (`goondan eval` adds file, swarm, times)."""
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False), encoding="utf-8")
