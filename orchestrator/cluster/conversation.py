"""One instance's conversation as a cluster node reads it from the swarm's history stream:
`goondan instance show` on any node shows the instance wherever it runs or ran (ARCHITECTURE.md
§15). The same `poll()` as the files' `InstanceConversation`, through the control socket: the
node sends each agent's events after the sequence already read, and they are folded here.
"""

from __future__ import annotations

from orchestrator.control.client import call, new_request_id
from orchestrator.observe.conversations import Line, NoSuchInstance
from protocol.control import InstanceHistory, OrchestratorInfo
from protocol.conversation import Message, fold
from protocol.transcript import decode_events

ASK_TIMEOUT = 30.0


class NodeConversation:
    def __init__(self, node: OrchestratorInfo, key: str, agent: str | None) -> None:
        self.node = node
        self.key = key
        self.agent = agent
        self.after: dict[str, int] = {}
        self.folded: dict[str, list[Message]] = {}
        self.shown: set[tuple[str, str]] = set()
        self.traces: dict[str, str] = {}
        self.bad_lines = 0

    @property
    def agent_width(self) -> int:
        return max(map(len, self.folded)) if len(self.folded) > 1 else 0

    def poll(self) -> list[Line]:
        """The messages added since the last poll (all of them the first time), by time.
        Raises NoSuchInstance with the node's coded error (the swarm's history has no such
        instance, or cannot be read now), ClientError when the node does not answer."""
        more = True
        while more:  # a long conversation comes in several replies
            more = self._fetch()
        lines = []
        for agent, messages in self.folded.items():
            for message in messages:
                if (agent, message.id) in self.shown:
                    continue
                self.shown.add((agent, message.id))
                trace = self.traces.get(message.turn_id) if message.turn_id else None
                lines.append(Line(agent, self.key, message, trace))
        lines.sort(key=lambda line: line.message.created_at)
        return lines

    def _fetch(self) -> bool:
        req = InstanceHistory(request_id=new_request_id(), instance_key=self.key,
                              agent=self.agent, after=dict(self.after))  # fmt: skip
        reply = call(self.node, req, timeout=ASK_TIMEOUT)
        if not reply.ok:
            assert reply.error is not None
            raise NoSuchInstance(reply.error)  # the node's coded error, printed as it is
        more = False
        for agent, part in reply.result["agents"].items():
            events, bad = decode_events("".join(part["lines"]).encode())
            self.bad_lines += len(bad)
            messages = self.folded.setdefault(agent, [])
            fold(messages, events)
            for message in messages:  # a turn's user message names its trace (turn.py)
                trace = message.metadata.get("traceId") if message.turn_id else None
                if isinstance(trace, str):
                    self.traces.setdefault(message.turn_id or "", trace)
            self.after[agent] = int(part["lastSeq"])
            more = more or bool(part["more"])
        return more
