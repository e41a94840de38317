"""Power loss: no write the ingress journal acknowledged is lost when the machine loses power.

A process kill proves little about durability: the page cache survives it and reaches the
disk later. Here the journal runs on an ext4 filesystem that is shut down without flushing
anything (`FS_IOC_SHUTDOWN`, NOLOGFLUSH: what the disk holds at that instant is all that
survives), then mounted again as after a reboot (tests/chaos/powercut.py says how, and why
that is faithful). Under hypothesis, the cut lands at random points of random workloads of
the real `SqliteJournal`: concurrent appends (group commits) of small and multi-page events,
idempotency keys and their repeats, claims, completions, reopenings, frequent checkpoints, in
both of ext4's data modes. Every acknowledged operation must be there after the reboot, whole,
and every acknowledged key must still map a retry to its first event.

The second test shows the harness has teeth: the same journal with `synchronous=OFF` loses
nothing to a SIGKILL, and loses acknowledged appends to the power cut.

Needs root (a loop mount in a mount namespace of its own), `unshare`, `mount` and
`mkfs.ext4`; skipped with the reason elsewhere. POWER_CUTS examples (default 12; `make chaos`
runs more).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.chaos.ext4 import unavailable
from tests.integration.harness import REPO, child_env

CUTS = int(os.environ.get("POWER_CUTS", "12"))
EXPERIMENT_S = 60.0
"""One experiment (mkfs, mount, run, cut, mount again, check) takes about a second."""


class Cutter:
    """The helper that cuts the power, in its own mount namespace, one plan at a time."""

    def __init__(self, workdir: Path) -> None:
        self.proc = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", sys.executable, "-m",
             "tests.chaos.powercut", "serve", str(workdir)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=REPO, env=child_env(), text=True,
        )  # fmt: skip
        self.ready = self._read()
        self.cuts = self.acked = self.lost = self.racing = self.racing_lost = 0
        """Figures of the power cuts so far (printed at the end; run with -s to see them)."""

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + EXPERIMENT_S
        ready, _, _ = select.select([self.proc.stdout], [], [], EXPERIMENT_S)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.proc.kill()
            _, err = self.proc.communicate(timeout=10)
            late = time.monotonic() > deadline
            return {"ready": False, "why": "no answer in time" if late else err.strip()[-500:]}
        report: dict[str, Any] = json.loads(line)
        return report

    def run(self, plan: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(plan) + "\n")
        self.proc.stdin.flush()
        report = self._read()
        assert "ready" not in report, f"the cutter died: {report['why']}"
        if plan["power"] and not plan["nosync"]:
            self.cuts += 1
            self.acked += report["acked"]
            self.lost += len(report.get("lost", []))
            self.racing += report.get("racing", 0)
            self.racing_lost += report.get("racing_lost", 0)
        return report

    def close(self) -> None:
        """Its stdin ends: it stops after the plan it runs (and its namespace goes)."""
        if self.proc.returncode is None:
            self.proc.communicate(timeout=EXPERIMENT_S)


@pytest.fixture(scope="module")
def cutter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cutter]:
    why = unavailable()
    if why is not None:
        pytest.skip(f"power loss simulation: {why}")
    helper = Cutter(tmp_path_factory.mktemp("power"))
    try:
        if not helper.ready["ready"]:
            pytest.skip(f"power loss simulation: {helper.ready['why']}")
        yield helper
    finally:
        helper.close()
        print(f"\npower loss: {helper.cuts} cuts, {helper.acked} operations acknowledged "
              f"before them, {helper.lost} lost ({helper.racing} more returned during a cut, "
              f"{helper.racing_lost} of them not kept)")  # fmt: skip


OPS = ["append"] * 4 + ["keyed"] * 2 + ["repeat", "claim", "complete", "reopen"]
plans = st.fixed_dictionaries(
    {
        "mode": st.sampled_from(["ordered", "writeback"]),
        "ops": st.integers(min_value=4, max_value=120).flatmap(
            lambda n: st.lists(st.sampled_from(OPS), min_size=n, max_size=n)
        ),
        "size": st.sampled_from([8, 400, 6000, 40000]),
        "concurrency": st.integers(min_value=1, max_value=16),
        # the cut comes after this part of the operations was acknowledged (past 1: all were)
        "cut_at": st.integers(min_value=0, max_value=22).map(lambda n: n / 20),
        "delay_ms": st.sampled_from([0, 0, 1, 2, 5, 20]),
        "checkpoint": st.sampled_from([None, None, 2]),
        "nosync": st.just(False),
        "power": st.just(True),
    }
)


@settings(max_examples=CUTS, deadline=None)
@given(plan=plans)
def test_a_power_cut_loses_no_acknowledged_journal_write(
    cutter: Cutter, plan: dict[str, Any]
) -> None:
    report = cutter.run(plan)
    event(
        f"acknowledged: {'0' if not report['acked'] else '1-9' if report['acked'] < 10 else '10+'}"
    )
    assert "error" not in report, report  # the next daemon opens the journal
    assert report["lost"] == [], report
    assert report["wrong"] == [], report


def test_the_power_cut_catches_a_journal_that_does_not_sync(cutter: Cutter) -> None:
    plan = {"mode": "ordered", "ops": ["append"] * 12, "size": 400, "concurrency": 2,
            "cut_at": 1.0, "delay_ms": 0, "checkpoint": None, "nosync": True}  # fmt: skip
    killed = cutter.run({**plan, "power": False})
    assert killed["acked"] == 12 and killed["lost"] == [], killed  # the page cache survived
    cut = cutter.run({**plan, "power": True})
    assert cut["acked"] == 12 and len(cut["lost"]) > 0, cut  # it did not
