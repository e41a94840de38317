"""`goondan instance replay KEY --bundle B2 [--as NEWKEY] [--agent A]`: what another bundle
(a changed prompt, model or tool) answers to the same conversation.

KEY's user inputs are read from its files (each turn's first user message, in `instance show`'s
order) and sent, in order, to a new instance NEWKEY of B2 in a daemon started for the replay
under a temporary state root, as `goondan eval` runs its cases (orchestrator/evals/): nothing
of the user's state is touched while it runs. Then each turn's two replies are printed side by
side, with a `difflib` diff where they differ, and the replayed conversation is kept as NEWKEY
under B2's swarm in the state root (messages only) for `instance show` and `instance fork`.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import secrets
import shutil
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

from bundles.loader import inspect_bundle
from orchestrator import daemon
from orchestrator.commands.instance_fork import NO_SWARM, ForkFailed, swarm_of
from orchestrator.control.client import Printer, layout_of
from orchestrator.control.server import ControlContext
from orchestrator.evals.target import LocalTarget, TargetFailed
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME, EXIT_USAGE
from orchestrator.ingress.send import pending_call
from orchestrator.observe.conversations import InstanceConversation, NoSuchInstance
from protocol.control import SendText
from protocol.conversation import Role
from protocol.endpoints import StateLayout, path_segment
from protocol.errors import ErrorCode, ProtocolError
from protocol.ids import check_instance_key

RUN_TIMEOUT_S = 3600.0
COLUMN = 38


@dataclass(frozen=True, slots=True)
class Turn:
    said: str
    reply: str


def original_turns(conversation: InstanceConversation, agent: str | None) -> list[Turn]:
    """Each turn of one agent of KEY: its first user input and its last text reply."""
    conversation.poll()
    name = agent or min(conversation.readers, key=lambda a: _first_at(conversation, a))
    turns: dict[str, Turn] = {}
    for message in conversation.readers[name].messages:
        turn = message.turn_id or ""
        if message.role is Role.USER and turn not in turns:
            turns[turn] = Turn(said=message.content, reply="")
        elif message.role is Role.ASSISTANT and message.content and turn in turns:
            turns[turn] = Turn(said=turns[turn].said, reply=message.content)
    return list(turns.values())


def _first_at(conversation: InstanceConversation, agent: str) -> float:
    messages = conversation.readers[agent].messages
    return messages[0].created_at if messages else float("inf")


async def _replay(ctx: ControlContext, key: str, agent: str | None, turns: list[Turn]) -> list[str]:
    target, replies = LocalTarget(ctx), []
    for n, turn in enumerate(turns):
        req = SendText(request_id=f"{key}-{n}", text=turn.said, agent=agent, instance_key=key,
                       timeout_ms=target.timeout_ms)  # fmt: skip
        try:
            reply = await target.send(req)
        except TargetFailed as exc:
            replies.append(f"({exc})")
            break
        call = pending_call(reply)
        if call is not None:  # nobody here can answer it: the rest would wait behind it
            replies.append(f"(waiting on client-side call {call.get('method')})")
            break
        error = reply.error
        replies.append(f"({error.code}: {error.message})" if error else reply.input)
    return replies


def _side_by_side(turns: list[Turn], replies: list[str]) -> str:
    out = [f"{'':<5}{'ORIGINAL':<{COLUMN}}  REPLAY"]
    for n, turn in enumerate(turns):
        replayed = replies[n] if n < len(replies) else "(not replayed)"
        same = replayed == turn.reply
        out.append(f"── turn {n + 1}{'' if same else ' (differs)'} · {turn.said[:60]!r}")
        left = textwrap.wrap(turn.reply, COLUMN) or [""]
        right = textwrap.wrap(replayed, COLUMN) or [""]
        for i in range(max(len(left), len(right))):
            a, b = (left[i] if i < len(left) else ""), (right[i] if i < len(right) else "")
            out.append(f"{'':<5}{a:<{COLUMN}}{'  ' if same else ' |'}{b}")
        if not same:
            diff = difflib.unified_diff(turn.reply.splitlines(), replayed.splitlines(),
                                        "original", "replay", lineterm="", n=1)  # fmt: skip
            out.extend(f"     {line}" for line in diff)
    differ = sum(r != (replies[n] if n < len(replies) else None) for n, r in
                 enumerate(t.reply for t in turns))  # fmt: skip
    out.append(f"{len(turns)} turn(s), {differ} differ")
    return "\n".join(out)


def _keep(temp: StateLayout, home: StateLayout, swarm: str, key: str) -> Path | None:
    """The replayed conversation, copied into the state root (messages only)."""
    src = temp.swarm_instances_dir(swarm) / path_segment(key)
    dst = home.swarm_instances_dir(swarm) / path_segment(key)
    if not src.is_dir() or dst.exists():
        return None
    aside = dst.with_name(dst.name + "#deleting-replay-" + secrets.token_hex(4))
    shutil.copytree(src, aside, ignore=shutil.ignore_patterns("workdir", "inbox", "pending-calls"))
    aside.rename(dst)
    return dst


def _new_key(args: argparse.Namespace, home: StateLayout, swarm: str) -> str:
    key = args.new_key or f"{args.instance_key[:80]}-replay-{secrets.token_hex(3)}"
    try:
        key = check_instance_key(key)
    except ProtocolError as exc:
        raise ForkFailed(ErrorCode.E_AGENT_INVALID_INSTANCE_KEY, f"--as: {exc.message}") from None
    if (home.swarm_instances_dir(swarm) / path_segment(key)).exists():
        raise ForkFailed(ErrorCode.E_INSTANCE_EXISTS, f"instance {key!r} already has state",
                         "choose another --as")  # fmt: skip
    return key


def _run_replay(args: argparse.Namespace, turns: list[Turn]) -> int:
    home = layout_of(args)
    loaded = inspect_bundle(args.bundle, state_root=home.root)
    if loaded.bundle is None:
        for diag in loaded.errors:
            sys.stderr.write(f"{diag}\n")
        return EXIT_USAGE
    swarm = loaded.bundle.swarm(None)
    key = _new_key(args, home, swarm.name)
    replies: list[str] = []

    async def go(ctx: ControlContext) -> int:
        async with asyncio.timeout(RUN_TIMEOUT_S):
            replies.extend(await _replay(ctx, key, args.agent, turns))
        return EXIT_OK

    with tempfile.TemporaryDirectory(prefix="goondan-replay-") as root:
        temp = StateLayout.from_env(Path(root))
        opts = daemon.DaemonOptions(bundle=loaded.bundle, swarm=swarm, layout=temp, quiet=True,
                                    on_started=go)  # fmt: skip
        code = daemon.run(opts)
        kept = _keep(temp, home, swarm.name, key) if code == EXIT_OK else None
    if code != EXIT_OK:
        return code
    sys.stdout.write(_side_by_side(turns, replies) + "\n")
    if kept is not None:
        sys.stdout.write(f"the replay is instance {key} of swarm {swarm.name} ({kept})\n")
    return EXIT_OK


def run_replay(args: argparse.Namespace, printer: Printer) -> int:
    swarm = swarm_of(args)
    if swarm is None:
        printer.error(NO_SWARM)
        return EXIT_USAGE
    try:
        conversation = InstanceConversation(layout_of(args), swarm, args.instance_key, args.agent)
        turns = original_turns(conversation, args.agent)
        if not turns:
            what = f"instance {args.instance_key!r} has no user input to replay"
            raise ForkFailed(ErrorCode.E_TURN_NOT_FOUND, what)
        return _run_replay(args, turns)
    except NoSuchInstance as exc:
        printer.error(exc.error)
        return EXIT_RUNTIME
    except ForkFailed as exc:
        printer.error(exc.error)
        return EXIT_USAGE
