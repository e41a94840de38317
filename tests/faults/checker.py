"""The checker: after a run, each instance's conversation as the history stream has it against
what the workload had acknowledged: each key's `caller` conversation against its sends, its
`worker` conversation against its acknowledged requests (agents__request, often across
nodes). Lost: acknowledged but not in the conversation; duplicated: a text twice in it; out of
order: acknowledged texts of one key (sent one after another) in another order;
unavailability: the longest time, after a fault healed, until a key's next answered send.

A request a `worker` conversation holds twice is counted apart (`reasked`), not as a
duplicate: a `caller` turn that a fault moved to another process resumes after its last stored
step and runs that step's agents__request again (docs/cluster.md "What is not guaranteed":
tools with outside effects may run twice), so the asked instance can be asked twice. Its
order is checked on each request's first arrival."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field

from tests.cluster.harness import history_entries
from tests.cluster.natsd import NatsCluster
from tests.faults.workload import Outcome


@dataclass
class Report:
    acknowledged: int = 0
    failed: int = 0
    requests: int = 0
    """Acknowledged sends that made `caller` ask `worker` (each must be in its conversation)."""
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    reasked: list[str] = field(default_factory=list)
    """Requests a `worker` received twice (a resumed `caller` turn asked again)."""
    out_of_order: list[str] = field(default_factory=list)
    double_writers: list[str] = field(default_factory=list)
    unavailable: dict[str, float] = field(default_factory=dict)
    """fault -> the longest wait, after it healed, for a key's next answer (s)."""

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.out_of_order or self.double_writers)

    def table(self) -> str:
        rows = [f"acknowledged {self.acknowledged} (requests {self.requests})  "
                f"failed/unanswered {self.failed}",
                f"lost {len(self.lost)} {self.lost[:5]}",
                f"duplicated {len(self.duplicated)} {self.duplicated[:5]}",
                f"re-asked by a resumed turn {len(self.reasked)} {self.reasked[:5]}",
                f"out of order {len(self.out_of_order)} {self.out_of_order[:5]}",
                f"double writers {len(self.double_writers)} {self.double_writers[:5]}"]  # fmt: skip
        rows += [
            f"  {fault:<40} unavailable max {s:5.1f} s" for fault, s in self.unavailable.items()
        ]
        return "\n".join(rows)


def check(
    outcomes: list[Outcome], callers: dict[str, list[str]], workers: dict[str, list[str]]
) -> Report:
    """`callers`/`workers`: key -> the user texts of its `caller`/`worker` conversation."""
    report = Report()
    for key, texts in callers.items():
        mine = [o for o in outcomes if o.key == key]
        acked = [o.text for o in mine if o.ok]
        report.acknowledged += len(acked)
        report.failed += len(mine) - len(acked)
        _compare(report, f"caller:{key}", acked, texts)
        asked = [o.text for o in mine if o.ok and o.request]
        report.requests += len(asked)
        _compare(report, f"worker:{key}", asked, workers.get(key, []), report.reasked)
    return report


def _compare(
    report: Report,
    instance: str,
    acked: list[str],
    texts: list[str],
    twice: list[str] | None = None,
) -> None:
    """One conversation (`texts`) against what was acknowledged to it, in order; a text in it
    twice goes to `twice` (default: the duplicates)."""
    counts = Counter(texts)
    report.lost += [f"{instance} {t}" for t in acked if counts[t] == 0]
    repeated = report.duplicated if twice is None else twice
    repeated += [f"{instance} {t}" for t, c in counts.items() if c > 1]
    present = [t for t in dict.fromkeys(texts) if t in set(acked)]  # first arrivals
    if present != [t for t in acked if counts[t] > 0]:
        report.out_of_order.append(instance)


def longest_gap(outcomes: list[Outcome], healed: float, until: float, keys: list[str]) -> float:
    """The longest time, between `healed` and `until`, that a key went without an answered
    send finishing: the wait for its first answer, and any outage after it (JetStream's
    elections can move the partitions again seconds after a heal)."""
    gaps = []
    for key in keys:
        done = sorted(
            o.done for o in outcomes if o.key == key and o.ok and healed <= o.done <= until
        )
        marks = [healed, *done, until]
        gaps.append(max(b - a for a, b in itertools.pairwise(marks)))
    return max(gaps, default=0.0)


def unavailability(outcomes: list[Outcome], healed: float, keys: list[str]) -> float:
    """The longest wait, from `healed`, for each key's first answered send finished after it."""
    waits = []
    for key in keys:
        after = [o.done for o in outcomes if o.key == key and o.ok and o.done >= healed]
        waits.append((min(after) if after else float("inf")) - healed)
    return max(waits, default=0.0)


async def broken_chains(cluster: NatsCluster, swarm: str, agent: str, key: str) -> list[str]:
    """Double writers, from the history stream itself: each append carries
    `Nats-Msg-Id: <writer epoch>:<the subject sequence it follows>` (orchestrator/cluster/
    history.py). With one writer at a time every append follows the subject's previous
    message; an append that follows an older one means two writers appended at once."""
    broken: list[str] = []
    previous = 0
    for msg in await history_entries(cluster, swarm, agent, key):
        seq = msg.metadata.sequence.stream
        follows = int((msg.headers or {}).get("Nats-Msg-Id", "x:-1").rsplit(":", 1)[1])
        if follows != previous:
            broken.append(f"{key}@{seq} follows {follows}, not {previous}")
        previous = seq
    return broken
