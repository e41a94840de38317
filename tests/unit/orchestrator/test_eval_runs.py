"""The eval runs kept under the state root (orchestrator/evals/runs.py): what is kept, pruned,
and what an id from a URL may name."""

from __future__ import annotations

import json
import os
from pathlib import Path

from orchestrator.evals import runs
from protocol.endpoints import StateLayout


def _report(rates: dict[str, float], swarm: str = "s") -> dict[str, object]:
    return {"results": [], "passRates": rates, "swarm": swarm, "file": "/e.yaml"}


def test_a_run_keeps_its_report_and_its_daemons_instances_and_logs(tmp_path: Path) -> None:
    layout = StateLayout(root=tmp_path / "root")
    daemon = tmp_path / "tmp-state"
    for name in ("instances/s/k/a/messages", "logs/s", "journal/s", "run/s"):
        (daemon / name).mkdir(parents=True)
    (daemon / "instances/s/k/a/messages/base.jsonl").write_text("{}\n")
    run_id = runs.new_id(0)
    where = runs.save(layout, run_id, _report({"c": 1.0}), daemon)
    assert sorted(p.name for p in (where / "state").iterdir()) == ["instances", "logs"]
    assert (where / "state/instances/s/k/a/messages/base.jsonl").read_text() == "{}\n"
    assert (where.stat().st_mode & 0o777) == 0o700
    assert ((where / "report.json").stat().st_mode & 0o777) == 0o600
    doc = runs.read(layout, run_id)
    assert doc is not None and doc["id"] == run_id and doc["passRates"] == {"c": 1.0}
    state = runs.state_layout(layout, run_id)
    assert state is not None and state.swarm_instances_dir("s").is_dir()


def test_only_the_newest_runs_are_kept(tmp_path: Path) -> None:
    layout = StateLayout(root=tmp_path)
    ids = [runs.new_id(1_700_000_000 + n) for n in range(5)]
    for run_id in ids:
        runs.save(layout, run_id, _report({}), None, keep=3)
    assert [r["id"] for r in runs.reports(layout)] == ids[:1:-1]  # newest first
    assert runs.prune(layout, 0) == ids[2:]
    assert runs.reports(layout) == []


def test_runs_started_within_one_second_are_listed_newest_first(tmp_path: Path) -> None:
    # two `goondan eval` runs a few hundred ms apart: their ids sort by start, not by suffix
    layout = StateLayout(root=tmp_path)
    for _ in range(20):  # the suffixes are random: each order of them is met
        ids = [runs.new_id(1_700_000_000.25), runs.new_id(1_700_000_000.75)]
        for run_id in ids:
            runs.save(layout, run_id, _report({}), None)
        assert [r["id"] for r in runs.reports(layout)] == ids[::-1]
        runs.prune(layout, 0)


def test_ids_of_the_earlier_shape_to_the_second_still_name_runs(tmp_path: Path) -> None:
    layout = StateLayout(root=tmp_path)
    old, new = "20231114T221320Z-abcdef", runs.new_id(1_700_000_001)
    assert new.startswith("20231114T221321.000Z-")
    for run_id in (old, new):
        runs.save(layout, run_id, _report({}), None)
    assert [r["id"] for r in runs.reports(layout)] == [new, old]


def test_an_id_names_only_a_run_directory(tmp_path: Path) -> None:
    layout = StateLayout(root=tmp_path / "root")
    secret = tmp_path / "elsewhere"
    secret.mkdir()
    (secret / "report.json").write_text(json.dumps(_report({"x": 1.0})))
    (secret / "state" / "instances").mkdir(parents=True)
    evals = layout.root / "evals"
    evals.mkdir(parents=True)
    planted = "20260101T000000Z-abcdef"
    os.symlink(secret, evals / planted)  # a run "directory" that is a link out of the root
    for hostile in (
        planted,
        "..",
        "../..",
        "../elsewhere",
        "",
        "x" * 300,
        "20260101T000000Z-ABCDEF",
        "20260101T000000.1Z-abcdef",
        "20260101T000000.000.000Z-abcdef",
    ):
        assert runs.read(layout, hostile) is None, hostile
        assert runs.state_layout(layout, hostile) is None, hostile
    assert runs.reports(layout) == []
    assert runs.prune(layout, 0) == []  # a link is not a run: never followed to delete
    assert (secret / "report.json").exists()


def test_an_unreadable_or_oversized_report_is_skipped(tmp_path: Path) -> None:
    layout = StateLayout(root=tmp_path)
    good, torn, big, link = (runs.new_id(1_700_000_000 + n) for n in range(4))
    runs.save(layout, good, _report({}), None)
    for run_id in (torn, big, link):
        (layout.root / "evals" / run_id).mkdir()
    (layout.root / "evals" / torn / "report.json").write_text('{"results": [')
    with open(layout.root / "evals" / big / "report.json", "wb") as fh:
        fh.truncate(runs.MAX_REPORT_BYTES + 1)
    os.symlink(
        layout.root / "evals" / good / "report.json", layout.root / "evals" / link / "report.json"
    )
    assert [r["id"] for r in runs.reports(layout)] == [good]
