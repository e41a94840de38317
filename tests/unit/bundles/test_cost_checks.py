"""Config rules of cost and human control: approvals, budgets, pricing, rate limits, fallback
chains. Each wrong setting is a coded error at its path, with a suggestion."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundles.loader import inspect_bundle
from protocol.errors import ErrorCode
from tests.unit.bundles.conftest import VALID_TAIL, write_bundle

E = ErrorCode
HEAD = "apiVersion: goondan.ai/v1\n"  # each extra document starts at line 25 (after `---`)
TOOL = "kind: Tool\nmetadata: {name: t}\nspec:\n  entry: ./tool.py\n  exports:\n    - name: run\n"


def _errors(tmp_path: Path, doc: str) -> list[tuple[ErrorCode, str, str]]:
    write_bundle(tmp_path, VALID_TAIL + "---\n" + HEAD + doc)
    (tmp_path / "tool.py").write_text("handlers = {}\n")
    found = inspect_bundle(tmp_path, packages=[]).errors
    return [(d.code, d.path, d.suggestion or "") for d in found]


def test_valid_approvals(tmp_path: Path) -> None:
    doc = (
        TOOL + "      approval: required\n    - name: pay\n      approval:\n"
        "        when: {properties: {amount: {minimum: 100}}}\n        message: Pay?\n"
    )
    assert _errors(tmp_path, doc) == []


MODEL = "kind: Model\nmetadata: {name: m}\nspec:\n  provider: scripted\n  model: x\n"
AGENT = "kind: Agent\nmetadata: {name: a}\nspec:\n  modelConfig: {modelRef: Model/fake}\n"
SWARM = (
    "kind: Swarm\nmetadata: {name: s2}\nspec:\n  entryAgent: Agent/main\n  agents: [Agent/main]\n"
)

COSTS = [
    (TOOL + "      approval: yes\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:32 spec.exports[0].approval", "expected type"),
    (TOOL + "      approval: {when: {type: nope}}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:32 spec.exports[0].approval.when.type",
     "fix the schema"),
    (TOOL + "      approval: {ttlSeconds: 0}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:32 spec.exports[0].approval.ttlSeconds", "seconds"),
    (TOOL + "      approval: required\n      deferred: {method: ui.x}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:32 spec.exports[0].approval", "remove approval"),
    (MODEL + "  pricing: {inputPerMTok: -1, outputPerMTok: 2}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:31 spec.pricing.inputPerMTok", "US dollars"),
    (MODEL + "  rateLimit: {requestsPerMinute: 0}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:31 spec.rateLimit.requestsPerMinute", "positive"),
    (MODEL + "  fallback: [Model/m]\n",
     E.E_CONFIG_INVALID_REF, "goondan.yaml:31 spec.fallback[0]", "once"),
    (MODEL + "  fallback: [Model/fake, Model/fake]\n",
     E.E_CONFIG_INVALID_REF, "goondan.yaml:31 spec.fallback[1]", "once"),
    (MODEL + "  fallback: [Model/nope]\n",
     E.E_CONFIG_REF_NOT_FOUND, "goondan.yaml:31 spec.fallback[0]", ""),
    (MODEL + "  replay: tapes\n  recording: {mode: record, dir: tapes}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:31 spec.replay", "keep one"),
    (MODEL + "  replay: ''\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:31 spec.replay", "keep one"),
    (AGENT + "  policy: {budget: {turnsPerDay: 0}}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:30 spec.policy.budget.turnsPerDay", "no limit"),
    (AGENT + "  policy: {budget: {costUsdPerDay: 5}}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:30 spec.policy.budget.costUsdPerDay", "pricing"),
    (SWARM + "  policy: {budget: {costUsdPerDay: 5}}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:31 spec.policy.budget.costUsdPerDay", "pricing"),
    (AGENT + "  policy: {budget: {tokensPerDay: lots}}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:30 spec.policy.budget.tokensPerDay", "type"),
]  # fmt: skip


@pytest.mark.parametrize(("doc", "code", "path", "hint"), COSTS)
def test_cost_rules(tmp_path: Path, doc: str, code: ErrorCode, path: str, hint: str) -> None:
    [(found, where, suggestion)] = _errors(tmp_path, doc)
    assert (found, where) == (code, path)
    assert hint in suggestion


def test_priced_models_allow_a_dollar_budget(tmp_path: Path) -> None:
    doc = (
        MODEL + "  pricing: {inputPerMTok: 3, outputPerMTok: 15, cachedInputPerMTok: 0.3}\n"
        "  rateLimit: {requestsPerMinute: 60, tokensPerMinute: 90000}\n---\n"
        + HEAD
        + "kind: Agent\nmetadata: {name: a}\nspec:\n  modelConfig: {modelRef: Model/m}\n"
        "  policy: {budget: {turnsPerDay: 100, tokensPerDay: 100000, costUsdPerDay: 2.5}}\n"
    )
    assert _errors(tmp_path, doc) == []
