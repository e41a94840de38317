"""Deferred (client-side) tool calls under the monkey.

Each cycle: `ask N` to a worker instance of its own (`dK`, so the queue behind a waiting turn
holds no other load), waited on like `goondan send`: the reply is the JSON-RPC request of
`client__ask`, or a coded error (the monkey killed the worker first). Then the client answers
it (`calls resolve`, the control request the CLI sends): the reply is the resumed turn's
answer `asked: {...}` carrying the client's result, or a coded error. The monkey kills the
`dK` processes too, while their turn waits or resumes: the call lives on disk and a new
process resumes the turn. At the end no call may be left pending or answered-but-untaken.
"""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

from protocol.control import CallsResolve, ControlReply, SendText
from protocol.endpoints import StateLayout
from protocol.jsonrpc import ANSWER_SUFFIX, PENDING_SUFFIX
from tests.chaos.load import GRACE, REQUEST_TIMEOUT_MS, Control, Tally

LIMIT_S = REQUEST_TIMEOUT_MS / 1000 + GRACE
SWARM = "chaos"  # the chaos bundle's swarm


def asked(answer: Any) -> str:
    """The worker's reply once the client answered `answer`: the tool result it saw."""
    result = {"status": "ok", "output": answer}
    return "asked: " + json.dumps(result, separators=(",", ":"))


def reply_code(reply: ControlReply) -> str | None:
    """The coded error of a control reply or of the response event it carries."""
    if not reply.ok:
        return reply.error.code if reply.error is not None else "uncoded"
    error = reply.result.get("error") if isinstance(reply.result, dict) else None
    return str(error.get("code") or "uncoded") if isinstance(error, dict) else None


async def answered(
    control: Control, req: SendText | CallsResolve, tally: Tally, hang: str
) -> ControlReply | None:
    """The reply to `req`; None once counted as a hang (no reply in time) or a coded error."""
    try:
        reply = await control.call(req, LIMIT_S)
    except TimeoutError:
        tally.hangs.append(hang)
        return None
    code = reply_code(reply)
    if code is not None:
        tally.answered[code] += 1
        return None
    return reply


async def deferrer(control: Control, tally: Tally, keys: list[str], stop: asyncio.Event) -> None:
    while not stop.is_set():
        tally.sent += 1
        n, key = tally.sent, random.choice(keys)
        req = SendText(request_id=f"d{n}", text=f"ask {n}", agent="worker", instance_key=key,
                       timeout_ms=REQUEST_TIMEOUT_MS)  # fmt: skip
        timeouts = tally.answered["E_AGENT_TIMEOUT"]
        reply = await answered(control, req, tally, f"ask {n} @ {key}: neither deferred nor failed")
        if reply is None:
            if tally.answered["E_AGENT_TIMEOUT"] > timeouts:
                await answer_found(control, tally, f"ask {n} @ {key}", key, {"n": n}, stop)
            continue
        rpc = reply.result.get("metadata", {}).get("deferred") if reply.ok else None
        if not isinstance(rpc, dict) or rpc.get("method") != "chaos.ask":
            tally.faults.append(f"ask {n} @ {key}: not a deferred call: {reply.result}")
            continue
        await resolve(control, tally, f"ask {n} @ {key}", str(rpc["id"]), {"n": n})


async def answer_found(
    control: Control, tally: Tally, what: str, key: str, answer: Any, stop: asyncio.Event
) -> None:
    """A client whose wait ran out before the call reached it does what `goondan calls list`
    lets a person do: find the instance's pending call on disk and answer it. Under load a
    turn can take longer than the client waits; its call is then pending all the same."""
    calls = StateLayout.from_env().instance_paths(SWARM, key, "worker").pending_calls_dir
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LIMIT_S
    while loop.time() < deadline:
        found = sorted(calls.glob("*" + PENDING_SUFFIX)) if calls.is_dir() else []
        for path in found:
            try:
                call_id = str(json.loads(path.read_bytes())["id"])
            except (OSError, ValueError, KeyError):
                continue  # answered and removed meanwhile, or being written
            await resolve(control, tally, what, call_id, answer)
            return
        if stop.is_set() and not found:
            return
        await asyncio.sleep(0.2)  # another process writes the call file: poll for it


async def resolve(control: Control, tally: Tally, what: str, call_id: str, answer: Any) -> None:
    req = CallsResolve(request_id=f"a{call_id}", call_id=call_id, result=answer,
                       timeout_ms=REQUEST_TIMEOUT_MS)  # fmt: skip
    reply = await answered(control, req, tally, f"{what}: the answer to {call_id} got no reply")
    if reply is None:
        return
    if isinstance(reply.result, dict) and reply.result.get("input") == asked(answer):
        tally.answered["reply"] += 1
    else:
        got = reply.result.get("input") if isinstance(reply.result, dict) else reply.result
        tally.faults.append(f"{what}: call {call_id} resumed with {str(got)[:300]!r}")


def leftover_calls(swarm: str) -> list[str]:
    """Pending-call files still on disk: a call nobody answered, or an answer no turn took."""
    root = StateLayout.from_env().swarm_instances_dir(swarm)
    found = root.glob("*/*/pending-calls/*") if root.is_dir() else []
    return sorted(str(p.relative_to(root)) for p in found if p.name.endswith(
        (PENDING_SUFFIX, ANSWER_SUFFIX)))  # fmt: skip
