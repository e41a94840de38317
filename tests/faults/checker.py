"""The checker: after a run, each instance's conversation as the history stream has it against
what the workload had acknowledged. Lost: acknowledged but not in the conversation; duplicated:
a text twice in it; out of order: acknowledged texts of one key (sent one after another) in
another order; unavailability: the longest time, after a fault healed, until a key's next
answered send."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from tests.cluster.harness import history_entries
from tests.cluster.natsd import NatsCluster
from tests.faults.workload import Outcome


@dataclass
class Report:
    acknowledged: int = 0
    failed: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    out_of_order: list[str] = field(default_factory=list)
    double_writers: list[str] = field(default_factory=list)
    unavailable: dict[str, float] = field(default_factory=dict)
    """fault -> the longest wait, after it healed, for a key's next answer (s)."""

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.out_of_order or self.double_writers)

    def table(self) -> str:
        rows = [f"acknowledged {self.acknowledged}  failed/unanswered {self.failed}",
                f"lost {len(self.lost)} {self.lost[:5]}",
                f"duplicated {len(self.duplicated)} {self.duplicated[:5]}",
                f"out of order {len(self.out_of_order)} {self.out_of_order[:5]}",
                f"double writers {len(self.double_writers)} {self.double_writers[:5]}"]  # fmt: skip
        rows += [
            f"  {fault:<40} unavailable max {s:5.1f} s" for fault, s in self.unavailable.items()
        ]
        return "\n".join(rows)


def check(outcomes: list[Outcome], histories: dict[str, list[str]]) -> Report:
    report = Report()
    for key, texts in histories.items():
        mine = [o for o in outcomes if o.key == key]
        acked = [o.text for o in mine if o.ok]
        report.acknowledged += len(acked)
        report.failed += len(mine) - len(acked)
        counts = Counter(texts)
        report.lost += [t for t in acked if counts[t] == 0]
        report.duplicated += [t for t, c in counts.items() if c > 1]
        present = [t for t in texts if t in set(acked)]
        if present != [t for t in acked if counts[t] > 0]:
            report.out_of_order.append(key)
    return report


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
