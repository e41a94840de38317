"""Studio's Evals view: the runs `goondan eval` kept under the state root (evals/runs.py), each
with its pass rate and cost and what changed against the previous run of the same eval file
and swarm; a case links to its conversation and trace in that run's own state."""

from __future__ import annotations

from typing import Any

from orchestrator.evals import report, runs
from protocol.endpoints import StateLayout
from protocol.errors import ErrorCode, ErrorInfo

SHOWN = 200
"""Runs listed at most (newest first): `--keep-runs` may keep more."""


class RunNotFound(Exception):
    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.error = ErrorInfo(
            code=ErrorCode.E_EVAL_RUN_NOT_FOUND,
            message=f"no eval run {run_id[:64]!r} is kept under the state root's evals/",
            suggestion="open one from Studio's Evals list (goondan eval keeps the newest "
            "--keep-runs runs)",
        )


def _head(doc: dict[str, Any]) -> dict[str, Any]:
    keys = ("id", "name", "file", "swarm", "startedAt", "finishedAt", "repeat", "attached")
    return {**{k: doc.get(k) for k in keys}, "summary": doc.get("summary") or {}}


def _previous(docs: list[dict[str, Any]], i: int) -> dict[str, Any] | None:
    """The next older run of the same eval file against the same swarm."""
    doc = docs[i]
    return next(
        (
            d
            for d in docs[i + 1 :]
            if (d.get("file"), d.get("swarm")) == (doc.get("file"), doc.get("swarm"))
        ),
        None,
    )


def _against(doc: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
    rates = doc.get("passRates")
    now = {str(k): float(v) for k, v in rates.items()} if isinstance(rates, dict) else {}
    found = report.changes(previous.get("passRates") if previous else None, now)
    return {"previous": previous["id"] if previous else None, **found}


def listing(layout: StateLayout) -> list[dict[str, Any]]:
    docs = runs.reports(layout)[:SHOWN]
    return [{**_head(doc), **_against(doc, _previous(docs, i))} for i, doc in enumerate(docs)]


def one(layout: StateLayout, run_id: str) -> dict[str, Any]:
    """A run's whole report, with what changed against the previous run."""
    if not runs.is_id(run_id):
        raise RunNotFound(run_id)
    docs = runs.reports(layout)
    for i, doc in enumerate(docs):
        if doc["id"] == run_id:
            return {**doc, **_against(doc, _previous(docs, i))}
    raise RunNotFound(run_id)


def state(layout: StateLayout, run_id: str) -> tuple[StateLayout, str]:
    """The state a run's own daemon left and its swarm: where its cases' conversations,
    runtime events and logs are."""
    doc = runs.read(layout, run_id)
    where = runs.state_layout(layout, run_id)
    if doc is None or where is None or not isinstance(doc.get("swarm"), str):
        raise RunNotFound(run_id)
    return where, doc["swarm"]
