"""The clients of the durable-ingress chaos phase, each the way a careful user drives goondan
while the orchestrator keeps dying (tests/chaos/lives.py), each call bounded:

- `nowait`: `goondan send --no-wait` over the control socket (`nw N` to a worker); every other
  one carries an idempotency key and is sent again with it when its daemon dies before
  answering; without a key, that outcome stays unknown.
- `wait`: a waiting `goondan send` with an idempotency key (`wt N` to a worker). When its
  daemon dies (or the wait times out) it learns the event id by sending the same key without
  waiting, then re-attaches by event id (`Attach`) until it has the reply.
- `agents_send` / `agents_request`: the same waiting send to a caller (`fwd N` / `req N`), whose
  turn hands the input to its worker with `agents__send` (the tool result says "accepted"
  with the event id; the client then attaches to that event until its turn ends) or asks it
  with `agents__request` (the result carries the reply).
- `webhook`: `POST /events`, event `note` (202 with the event id; attached to until its turn
  ends) or `message` (200 with the reply); half with an `Idempotency-Key`, retried with it
  after a cut and, once answered, deliberately repeated: the repeat must name the same event
  (and reply).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import msgspec

from protocol.control import Attach, ControlReply, SendText
from tests.chaos.ledger import Input, Ledger, Tally
from tests.chaos.lives import CUT, HANG, Lives, Lost
from tests.chaos.load import Control

WAIT_MS = 15_000
GRACE_S = 5.0
ACK_S = 10.0
"""A `--no-wait` send is answered once journaled: no answer in this long is a hang."""
HOOK_S = 15 + GRACE_S
"""The Connection's `timeoutMs` is 15 s (then 504)."""
ATTEMPTS = 30
"""Cuts one input may meet before its client gives up on it (a hang)."""


@dataclass
class Clients:
    lives: Lives
    control: Control
    url: str
    keys: list[str]
    ledger: Ledger = field(default_factory=Ledger)
    numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    async def call(self, req: SendText | Attach, limit: float) -> ControlReply | Lost:
        life = await self.lives.alive()
        reply = await self.lives.within(life, self.control.call(req, limit), limit)
        if isinstance(reply, ControlReply) and not reply.ok and life.dead.is_set():
            return CUT  # refused by the next life (the old life's token): never taken
        return reply

    # -- `goondan send --no-wait` ----------------------------------------------------------

    async def nowait(self, stop: asyncio.Event) -> None:
        tally = self.ledger.path("nowait")
        while not stop.is_set():
            n, key = next(self.numbers), random.choice(self.keys)
            text = f"nw {n}"
            given = Input("nowait", "worker", key, text, reply=f"worker: {text}")
            keyed = n % 2 == 0
            req = SendText(request_id=f"nw{n}", text=text, agent="worker", instance_key=key,
                           wait=False, idempotency_key=f"nw-{n}" if keyed else None)  # fmt: skip
            tally.sent += 1
            event_id = await self._accepted(tally, given, req, keyed)
            if event_id is not None:
                self.ledger.ack(replace(given, event_id=event_id))
            await asyncio.sleep(0.05)  # pacing: accepts are cheap, turns are not

    async def _accepted(self, tally: Tally, given: Input, req: SendText, keyed: bool) -> str | None:
        """The event id a `--no-wait` send is accepted as; None (booked) when not."""
        for _ in range(ATTEMPTS):
            reply = await self.call(req, ACK_S)
            if reply is CUT:
                tally.cut += 1
                if not keyed:
                    self.ledger.lose(given)
                    return None
                tally.retried += 1
                continue
            if reply is HANG:
                self.ledger.hang(given, "no answer to a send without waiting")
                return None
            assert isinstance(reply, ControlReply)
            if reply.ok and isinstance(reply.result, str):
                return reply.result
            self._refused(tally, given, reply)
            return None
        self.ledger.hang(given, f"cut {ATTEMPTS} times")
        return None

    def _refused(self, tally: Tally, given: Input, reply: ControlReply) -> None:
        if reply.ok or reply.error is None or not reply.error.code:
            tally.faults.append(f"{given.text}: {reply}")
            return
        self.ledger.refuse(given, reply.error.code)

    # -- waiting `goondan send`, re-attached by event id -------------------------------------

    async def waiting(self, stop: asyncio.Event, path: str, agent: str, prefix: str) -> None:
        tally = self.ledger.path(path)
        while not stop.is_set():
            n, key = next(self.numbers), random.choice(self.keys)
            text = f"{prefix} {n}"
            given = Input(path, agent, key, text)
            req = SendText(request_id=f"{prefix}{n}", text=text, agent=agent, instance_key=key,
                           timeout_ms=WAIT_MS, idempotency_key=f"{prefix}-{n}")  # fmt: skip
            tally.sent += 1
            answer = await self._answer(tally, given, req)
            if answer is not None:
                await self._judge(tally, given, answer)

    async def _answer(self, tally: Tally, given: Input, req: SendText) -> dict[str, Any] | None:
        reply = await self.call(req, WAIT_MS / 1000 + GRACE_S)
        if reply is HANG:
            self.ledger.hang(given, "no reply to a waiting send")
            return None
        if isinstance(reply, ControlReply) and reply.ok and isinstance(reply.result, dict):
            return reply.result
        timed_out = isinstance(reply, ControlReply) and reply.error is not None and (
            reply.error.code == "E_AGENT_TIMEOUT")  # fmt: skip
        if isinstance(reply, ControlReply) and not timed_out:
            self._refused(tally, given, reply)
            return None
        if reply is CUT:
            tally.cut += 1
        else:
            tally.late += 1
        ask = msgspec.structs.replace(req, request_id=req.request_id + "?", wait=False)
        event_id = await self._accepted(tally, given, ask, keyed=True)
        if event_id is None:
            return None
        self.ledger.ack(replace(given, event_id=event_id))
        return await self._attach(tally, given, event_id)

    async def _attach(self, tally: Tally, given: Input, event_id: str) -> dict[str, Any] | None:
        req = Attach(request_id=f"a{event_id}", event_id=event_id, timeout_ms=WAIT_MS)
        for _ in range(ATTEMPTS):
            tally.attached += 1
            reply = await self.call(req, WAIT_MS / 1000 + GRACE_S)
            if reply is CUT:
                tally.cut += 1
                continue
            if reply is HANG:
                self.ledger.hang(given, f"no reply to attach {event_id}")
                return None
            assert isinstance(reply, ControlReply)
            if reply.ok and isinstance(reply.result, dict):
                return reply.result
            if reply.error is None or reply.error.code != "E_AGENT_TIMEOUT":
                tally.faults.append(f"{given.text}: attach {event_id}: {reply}")
                return None
            tally.late += 1
        self.ledger.hang(given, f"attach {event_id} cut {ATTEMPTS} times")
        return None

    async def _attach_ended(self, tally: Tally, given: Input, event_id: str) -> None:
        """Attach to an event nobody answers: it says when its turn has ended."""
        answer = await self._attach(tally, given, event_id)
        if answer is not None and answer != {"eventId": event_id, "finished": True}:
            tally.faults.append(f"{given.text}: attach {event_id} answered {answer}")

    async def _judge(self, tally: Tally, given: Input, answer: dict[str, Any]) -> None:
        """The reply of a waiting send: the worker's answer, or the caller's tool result (an
        event `agents__send` handed on is then attached to, until its turn ends)."""
        text = str(answer.get("input", ""))
        self.ledger.ack(replace(given, reply=text))
        if given.agent == "worker":
            if text != f"worker: {given.text}":
                tally.faults.append(f"{given.text}: replied {text[:200]!r}")
            return
        handed = Input(f"{given.path} (handed on)", "worker", given.key, given.text,
                       reply=f"worker: {given.text}")  # fmt: skip
        try:
            result = json.loads(text)
        except ValueError:
            tally.faults.append(f"{given.text}: the caller replied {text[:200]!r}")
            return
        output = result.get("output") or {}
        if result.get("status") != "ok":  # a cut call (E_AGENT_CRASHED): handed on or not
            self.ledger.lose(handed)
        elif given.path == "agents_request" and output.get("response") != handed.reply:
            tally.faults.append(f"{given.text}: the worker replied {output.get('response')!r}")
        else:
            self.ledger.ack(replace(handed, event_id=output.get("eventId")))
            if given.path == "agents_send":
                await self._attach_ended(tally, handed, str(output.get("eventId")))

    # -- the webhook ----------------------------------------------------------------------

    async def webhook(self, stop: asyncio.Event) -> None:
        tally = self.ledger.path("webhook")
        async with httpx.AsyncClient(timeout=HOOK_S + 1) as client:
            while not stop.is_set():
                n, key = next(self.numbers), random.choice(self.keys)
                note, keyed = random.random() < 0.5, random.random() < 0.5
                text = f"{'note' if note else 'hook'} {n}"
                given = Input("webhook", "worker", key, text, reply=f"worker: {text}")
                body = {"event": "note" if note else "message", "text": text,
                        "properties": {"key": key}}  # fmt: skip
                headers = {"Idempotency-Key": f"h-{n}"} if keyed else {}
                tally.sent += 1
                first = await self._post(tally, given, client, body, headers)
                if first is not None and note:
                    await self._attach_ended(tally, given, first["eventId"])
                if first is None or not keyed:
                    continue
                tally.repeats += 1  # a deliberate retry: the same event, the same answer
                again = await self._post(tally, given, client, body, headers)
                if again is not None and again != first:
                    tally.faults.append(f"{text}: answered {first}, the repeat {again}")

    async def _post(
        self,
        tally: Tally,
        given: Input,
        client: httpx.AsyncClient,
        body: dict[str, Any],
        headers: dict[str, str],
    ) -> dict[str, Any] | None:
        """The answer (event id, reply) to one webhook input; None (booked) when none."""
        for _ in range(ATTEMPTS):
            life = await self.lives.listening()
            post = client.post(f"{self.url}/events", json=body, headers=headers)
            try:
                response = await self.lives.within(life, post, HOOK_S)
            except httpx.ConnectError:
                continue  # nothing was sent (the connector was not listening yet)
            except (httpx.TransportError, httpx.TimeoutException) as exc:
                response = CUT if life.dead.is_set() else HANG
                if response is HANG:
                    tally.faults.append(f"{given.text}: {exc!r} while the daemon lived")
                    return None
            answer, again = self._judge_hook(tally, given, response, bool(headers))
            if not again:
                return answer
            tally.retried += 1
        self.ledger.hang(given, f"cut {ATTEMPTS} times")
        return None

    def _judge_hook(
        self, tally: Tally, given: Input, response: httpx.Response | Lost, keyed: bool
    ) -> tuple[dict[str, Any] | None, bool]:
        """(the answer, or None when booked as it is; whether to send it again)."""
        if response is HANG:
            self.ledger.hang(given, "no HTTP response")
            return None, False
        if isinstance(response, httpx.Response):
            data = _json(response)
            code = (data.get("error") or {}).get("code")
            if response.status_code in (200, 202) and data.get("eventId"):
                answer = {"eventId": data["eventId"], "reply": data.get("reply")}
                self.ledger.ack(replace(given, event_id=str(data["eventId"])))
                if response.status_code == 200 and data.get("reply") != given.reply:
                    tally.faults.append(f"{given.text}: replied {data.get('reply')!r}")
                return answer, False
            if code != "E_AGENT_TIMEOUT":  # accepted, not answered in time: like a cut
                if code:
                    self.ledger.refuse(given, str(code))
                else:
                    tally.faults.append(f"{given.text}: {response.status_code} {data}")
                return None, False
        tally.cut += 1
        if not keyed:
            self.ledger.lose(given)
        return None, keyed


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
