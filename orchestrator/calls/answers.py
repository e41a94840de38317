"""The daemon's record of answers to deferred calls (ARCHITECTURE.md §10).

An answer is written here, durably, before the agent hears of it, and the agent gets it only
in the `deferred_resolve` frame, never from a file: the instance tree (`pending-calls/`
included) is written by the agent and by whatever its tools run, so an answer read from there
could be one the agent gave itself. This directory (`StateLayout.answers_dir`) is the
daemon's: `<answers>/<instanceKey>/<agent>/<call id>.json`, one `Answered` each.

A record lives until its agent cannot need it again:
- an approval is spent when it is handed to a ready process (`DeferredIndex._hand`): a process
  that died before taking it leaves the call pending, to be decided again, and an approval is
  never given twice (the approved tool never runs twice);
- any other answer stays until the call's file is gone (the agent removes it once the result
  is in the conversation): a process that dies in between gets it again from the next `ready`.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import structlog

from protocol.durable import write_atomic
from protocol.endpoints import path_segment
from protocol.ids import Address, agent_address
from protocol.jsonrpc import APPROVE_METHOD, JsonRpcResponse, PendingCall

log = structlog.get_logger("goondan.deferred")
SUFFIX = ".json"


class Answered(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    agent: str
    instance_key: str
    call_id: str
    approval: bool
    answer: JsonRpcResponse
    at: float


_decode = msgspec.json.Decoder(Answered).decode


class AnswerBook:
    """The records on disk, and an index of them by instance (a `ready` asks it, so a spawn
    never touches the disk for an instance without answers)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self._by_instance: dict[Address, dict[str, Answered]] = {}

    def load(self) -> None:
        """At daemon start: every record an earlier daemon left."""
        self._by_instance.clear()
        for path in sorted(self.dir.glob("*/*/*" + SUFFIX)) if self.dir.is_dir() else []:
            try:
                answered = _decode(path.read_bytes())
            except (OSError, msgspec.DecodeError) as exc:
                log.warning("deferred_answer_unreadable", path=str(path), error=str(exc))
                continue
            if path != self._path(answered.agent, answered.instance_key, answered.call_id):
                log.warning("deferred_answer_misplaced", path=str(path))
                continue
            self._index(answered)

    def record(self, call: PendingCall, answer: JsonRpcResponse, at: float) -> Answered:
        approval = call.method == APPROVE_METHOD
        answered = Answered(agent=call.agent, instance_key=call.instance_key, call_id=call.id,
                            approval=approval, answer=answer, at=at)  # fmt: skip
        path = self._path(call.agent, call.instance_key, call.id)
        write_atomic(path, msgspec.json.encode(answered))
        self._index(answered)
        _log(call, answer)
        return answered

    def of(self, address: Address) -> list[Answered]:
        return list(self._by_instance.get(address, {}).values())

    def has_any(self, address: Address) -> bool:
        return address in self._by_instance

    def has(self, address: Address, call_id: str) -> bool:
        return call_id in self._by_instance.get(address, {})

    def instances(self) -> list[Address]:
        return list(self._by_instance)

    def drop(self, address: Address, call_id: str) -> None:
        calls = self._by_instance.get(address)
        if calls is None or calls.pop(call_id, None) is None:
            return
        if not calls:
            del self._by_instance[address]
        self._path(address.name, address.instance_key, call_id).unlink(missing_ok=True)

    def _index(self, answered: Answered) -> None:
        address = agent_address(answered.agent, answered.instance_key)
        self._by_instance.setdefault(address, {})[answered.call_id] = answered

    def _path(self, agent: str, instance_key: str, call_id: str) -> Path:
        return (
            self.dir
            / path_segment(instance_key)
            / path_segment(agent)
            / (path_segment(call_id) + SUFFIX)
        )


def _log(call: PendingCall, answer: JsonRpcResponse) -> None:
    """An approval's decision as recorded (its `by` and `via` are goondan's), else the call."""
    if call.method != APPROVE_METHOD:
        log.info("deferred_call_resolved", call_id=call.id, error=answer.error is not None)
        return
    record = answer.result if answer.error is None else answer.error.data
    record = record if isinstance(record, dict) else {}
    log.info("approval_decided", call_id=call.id, tool=call.params.get("tool"),
             decision="approved" if answer.error is None else "denied", by=record.get("by"),
             via=record.get("via"), agent=call.agent, instanceKey=call.instance_key)  # fmt: skip
