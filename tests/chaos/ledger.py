"""What the durable-ingress chaos clients were told, and the check of it against the
conversations once the run is over.

Every input has a text of its own (`nw 12`, `hook 7`, ...), so its user message can be found
in its instance's conversation whatever happened to its event id. An input is:
- **acked**: the daemon said it took it (a control reply with an event id or the reply itself,
  an HTTP 202/200, a tool result "accepted"). It must be processed exactly once: one user
  message with that text (carrying the acknowledged event id when there was one), its turn
  ended, one final answer (the expected reply, when known), and that reply nowhere else;
- **unknown**: its daemon died before it answered, and the client had no key to retry with.
  It is processed at most once;
- **refused**: a coded error said it was not taken. It is never processed;
- **hung**: no answer while its daemon lived. A failure, unless it is found processed.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from agent_process.messages import Message, Role
from agent_process.store import ConversationStore
from protocol.endpoints import StateLayout


@dataclass(frozen=True)
class Input:
    path: str
    agent: str
    key: str
    text: str
    event_id: str | None = None
    reply: str | None = None
    """The final answer its turn must end with (None: any one answer)."""

    @property
    def id(self) -> tuple[str, str]:
        return self.agent, self.text


@dataclass
class Tally:
    """One path's counts."""

    sent: int = 0
    acked: int = 0
    cut: int = 0
    """Calls whose daemon died before answering."""
    retried: int = 0
    """Calls sent again with the same idempotency key after a cut."""
    attached: int = 0
    """Attaches by event id: waits taken up again after a cut, and (to events nobody
    answers) waits for their turn to end."""
    late: int = 0
    """Waits that ran out (E_AGENT_TIMEOUT) and were taken up again by event id."""
    repeats: int = 0
    """Deliberate repeats of an acknowledged input's idempotency key."""
    unknown: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    hangs: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    """Answers that are wrong: another reply, another event id for the same key, ..."""

    def figures(self) -> dict[str, Any]:
        return {
            "sent": self.sent, "acked": self.acked, "cut": self.cut, "retried": self.retried,
            "attached": self.attached, "late": self.late, "repeats": self.repeats,
            "unknown": self.unknown,
            "refused": dict(self.refused), "hangs": len(self.hangs), "faults": len(self.faults),
        }  # fmt: skip


@dataclass
class Ledger:
    paths: dict[str, Tally] = field(default_factory=dict)
    acked: dict[tuple[str, str], Input] = field(default_factory=dict)
    """(agent, text) -> the input (`req 3` is an input of the caller and of the worker)."""
    unknown: dict[tuple[str, str], Input] = field(default_factory=dict)
    refused: dict[tuple[str, str], Input] = field(default_factory=dict)
    hung: dict[tuple[str, str], Input] = field(default_factory=dict)

    def path(self, name: str) -> Tally:
        return self.paths.setdefault(name, Tally())

    def ack(self, given: Input) -> None:
        """`given` was acknowledged (a later acknowledgement may add the event id)."""
        known = self.acked.get(given.id)
        self.unknown.pop(given.id, None)
        if known is not None:
            if given.event_id and known.event_id and given.event_id != known.event_id:
                self.path(given.path).faults.append(
                    f"{given.text}: acknowledged as {known.event_id}, then as {given.event_id}"
                )
            if known.event_id or not given.event_id:
                return
        else:
            self.path(given.path).acked += 1
        self.acked[given.id] = given

    def lose(self, given: Input) -> None:
        if given.id not in self.acked:
            self.path(given.path).unknown += 1
            self.unknown[given.id] = given

    def refuse(self, given: Input, code: str) -> None:
        self.path(given.path).refused[code] += 1
        self.refused[given.id] = given

    def hang(self, given: Input, what: str) -> None:
        self.path(given.path).hangs.append(f"{given.text}: {what}")
        self.hung[given.id] = given


@dataclass
class Turn:
    user: Message
    answers: list[Message]
    at: int
    """The user message's place in the conversation."""


def turns(messages: list[Message]) -> dict[str, list[Turn]]:
    """Each user message that carries an event id (an input), by its text, with the final
    answers (assistant messages without tool calls) of its turn."""
    finals: dict[str, list[Message]] = {}
    for m in messages:
        if m.role is Role.ASSISTANT and not m.tool_calls and m.turn_id:
            finals.setdefault(m.turn_id, []).append(m)
    found: dict[str, list[Turn]] = {}
    for at, m in enumerate(messages):
        if m.role is Role.USER and "eventId" in m.metadata:
            found.setdefault(m.content, []).append(Turn(m, finals.get(m.turn_id or "", []), at))
    return found


Where = tuple[str, str]
"""An instance: (agent, instance key)."""


def conversations(swarm: str) -> dict[Where, list[Message]]:
    """Every instance's conversation, replayed by the store: (agent, key) -> messages."""
    root = StateLayout.from_env().swarm_instances_dir(swarm)
    found = {}
    for directory in sorted(root.glob("*/*/messages")):
        store = ConversationStore(directory)
        store.open()
        found[(directory.parent.name, directory.parent.parent.name)] = list(store.messages)
        store.close()
    return found


def verify(ledger: Ledger, swarm: str) -> dict[str, list[str]]:
    """Every way the conversations break the ledger, by kind (empty lists: none)."""
    found = {where: turns(messages) for where, messages in conversations(swarm).items()}
    faults: dict[str, list[str]] = {"lost": [], "duplicated": [], "unfinished": [], "wrong": [],
                                    "order": [], "refused_processed": [], "hangs": []}  # fmt: skip
    for where, by_text in found.items():
        ran = [t for ts in by_text.values() for t in ts]
        seen = Counter(t.user.metadata["eventId"] for t in ran)
        faults["duplicated"] += [f"{where}: event {e} x{n}" for e, n in seen.items() if n > 1]
        faults["duplicated"] += [f"{where}: {text!r} x{len(ts)}"
                                 for text, ts in by_text.items() if len(ts) > 1]  # fmt: skip
        faults["duplicated"] += [f"{where}: {t.user.content!r} answered x{len(t.answers)}"
                                 for t in ran if len(t.answers) > 1]  # fmt: skip
    for given in ledger.acked.values():
        fault = _judge(given, found.get((given.agent, given.key), {}))
        if fault is not None:
            faults[fault[0]].append(fault[1])
    faults["order"] += out_of_order(ledger, "nowait", found)
    for given in ledger.refused.values():
        if found.get((given.agent, given.key), {}).get(given.text):
            faults["refused_processed"].append(f"{given.path} {given.text}")
    for given in ledger.hung.values():
        if given.text not in found.get((given.agent, given.key), {}):
            faults["hangs"].append(f"{given.path} {given.text}: never answered, never processed")
    return faults


def out_of_order(ledger: Ledger, path: str, found: dict[Where, dict[str, list[Turn]]]) -> list[str]:
    """The inputs of one sequential client (`path`) each instance ran in another order than
    they were acknowledged (the journal's order is the order of acceptance, across restarts)."""
    faults = []
    for where, by_text in found.items():
        acked = [g.text for g in ledger.acked.values() if g.path == path and
                 (g.agent, g.key) == where and len(by_text.get(g.text, [])) == 1]  # fmt: skip
        ran = sorted(acked, key=lambda text: by_text[text][0].at)
        if ran != acked:
            first = next(i for i, (a, b) in enumerate(zip(acked, ran, strict=True)) if a != b)
            faults.append(
                f"{where}: acknowledged {acked[first : first + 3]}, ran {ran[first : first + 3]}"
            )
    return faults


def _judge(given: Input, by_text: dict[str, list[Turn]]) -> tuple[str, str] | None:
    """(fault kind, what) for one acknowledged input, or None when it is right."""
    where = f"{given.path} {given.text!r} @ {given.agent}/{given.key}"
    ts = by_text.get(given.text, [])
    if not ts:
        return "lost", f"{where} ({given.event_id})"
    if len(ts) > 1:
        return None  # counted above, with every other duplicate
    [turn] = ts
    if given.event_id is not None and turn.user.metadata["eventId"] != given.event_id:
        return "wrong", f"{where}: acknowledged {given.event_id}, ran {turn.user.metadata}"
    if turn.user.metadata.get("turnOutcome") != "completed":
        return "unfinished", f"{where}: {turn.user.metadata}"
    if not turn.answers:
        return "unfinished", f"{where}: no final answer"
    if given.reply is not None and turn.answers[0].content != given.reply:
        return "wrong", f"{where}: answered {turn.answers[0].content[:200]!r}"
    return None


INTER_AGENT = {"agents__send": "agents_send", "agents__request": "agents_request"}


def inter_agent_acks(messages: list[Message]) -> list[Input]:
    """The worker inputs a caller's conversation shows accepted: each `agents__send` or
    `agents__request` result with status ok carries the event id (the input is the caller's
    own input of that turn, handed on as it is)."""
    inputs = {m.turn_id: m.content for m in messages if m.role is Role.USER and m.turn_id}
    found = []
    for m in messages:
        if m.role is not Role.TOOL or m.tool_name not in INTER_AGENT:
            continue
        result = json.loads(m.content)
        output = result.get("output") or {}
        text = inputs.get(m.turn_id or "")
        if result.get("status") == "ok" and output.get("eventId") and text is not None:
            path = f"{INTER_AGENT[m.tool_name]} (handed on)"
            found.append(Input(path, "worker", output["instanceKey"], text, output["eventId"],
                               f"worker: {text}"))  # fmt: skip
    return found
