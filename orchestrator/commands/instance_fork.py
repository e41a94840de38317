"""`goondan instance fork KEY --at TURN --as NEWKEY [--agent A]`: time travel on a conversation.

A new instance whose conversation is KEY's up to and including turn TURN: `N` (the Nth turn,
1-based, in the order `goondan instance show` prints them) or the turn id `show` prints (or an
unambiguous prefix of it). KEY is only read. Conversations are event-sourced files
(ARCHITECTURE.md §6-7): the fork is the folded messages written as NEWKEY's `base.jsonl`, one
per agent, so the next `goondan send --instance NEWKEY` continues from there. The workspace and
extension state are not copied (the conversation only).

Files only, with or without a daemon: a running daemon only ever creates an instance's files
when it spawns it, so the fork refuses a NEWKEY that has files or that the daemon lists
(E_INSTANCE_EXISTS), and writes the new tree aside then renames it into place in one step.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import msgspec

from orchestrator.control import localstate
from orchestrator.control.client import (
    ClientError,
    Printer,
    call,
    find_daemon,
    layout_of,
    new_request_id,
)
from orchestrator.control.client import pick_swarm as _pick_swarm
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME, EXIT_USAGE
from orchestrator.observe.conversations import InstanceConversation, Line, NoSuchInstance
from protocol.control import InstanceList
from protocol.conversation import Message
from protocol.durable import write_atomic
from protocol.endpoints import StateLayout, path_segment
from protocol.errors import ErrorCode, ErrorInfo, ProtocolError
from protocol.ids import check_instance_key

_encoder = msgspec.json.Encoder()
ASIDE = "#deleting-fork-"
"""The tree is written under this name first: listings skip it (`trees.is_aside`) and a daemon
clears one a crash left behind, as it clears a deleted tree."""


class ForkFailed(Exception):
    def __init__(self, code: ErrorCode, message: str, suggestion: str | None = None) -> None:
        super().__init__(message)
        self.error = ErrorInfo(code=code, message=message, suggestion=suggestion)


@dataclass(frozen=True, slots=True)
class Fork:
    turn: str
    number: int
    messages: dict[str, list[Message]]
    """agent -> the messages the new instance starts with."""


def turns(lines: list[Line]) -> list[str]:
    """The turn ids in the order `instance show` prints them (first message by time)."""
    return list(dict.fromkeys(line.message.turn_id for line in lines if line.message.turn_id))


def pick_turn(ids: list[str], at: str, key: str) -> tuple[int, str]:
    """(1-based number, turn id) of `at`: a number 1..N, a turn id or a unique prefix of one."""
    if at.isdigit() and 1 <= int(at) <= len(ids):
        return int(at), ids[int(at) - 1]
    found = [t for t in ids if t == at] or [t for t in ids if len(at) >= 4 and t.startswith(at)]
    if len(found) == 1:
        return ids.index(found[0]) + 1, found[0]
    raise ForkFailed(ErrorCode.E_TURN_NOT_FOUND,
                     f"instance {key!r} has no turn {at[:80]!r} (it has {len(ids)} turn(s))",
                     f"pass --at 1..{len(ids)} or a turn id `goondan instance show` prints"
                     if ids else "the instance has no turn yet")  # fmt: skip


def plan(conversation: InstanceConversation, at: str) -> Fork:
    """What the fork holds: each agent's messages up to the end of turn `at` (by time, as
    `show` merges the agents of one instance)."""
    conversation.poll()
    lines = conversation.messages()
    number, turn = pick_turn(turns(lines), at, conversation.key)
    cutoff = max(line.message.created_at for line in lines if line.message.turn_id == turn)
    kept: dict[str, list[Message]] = {}
    for agent, reader in conversation.readers.items():
        head: list[Message] = []
        for message in reader.messages:
            if message.created_at > cutoff:
                break
            head.append(message)
        if head:
            kept[agent] = head
    return Fork(turn=turn, number=number, messages=kept)


def _live_keys(args: argparse.Namespace, swarm: str) -> set[str]:
    """The instances the running daemon of `swarm` knows (none when no daemon runs)."""
    try:
        info = find_daemon(args)
    except ClientError:
        return set()
    if info.swarm != swarm:
        return set()
    try:
        reply = call(info, InstanceList(request_id=new_request_id()), timeout=30.0)
    except ClientError as exc:
        raise ForkFailed(ErrorCode(exc.error.code), exc.error.message) from None
    rows = reply.result.get("instances", []) if isinstance(reply.result, dict) else []
    return {str(r.get("instanceKey")) for r in rows if isinstance(r, dict)}


def write(layout: StateLayout, swarm: str, new_key: str, fork: Fork) -> Path:
    """The new instance's tree, written aside then renamed into place (never half there)."""
    final = layout.swarm_instances_dir(swarm) / path_segment(new_key)
    if final.exists():
        raise ForkFailed(ErrorCode.E_INSTANCE_EXISTS, f"instance {new_key!r} already has state",
                         "choose another --as, or `goondan instance delete` it first")  # fmt: skip
    aside = final.with_name(final.name + ASIDE + secrets.token_hex(4))
    try:
        for agent, messages in fork.messages.items():
            paths = layout.instance_paths(swarm, new_key, agent)
            base = aside / paths.root.name / "messages" / "base.jsonl"
            write_atomic(base, b"".join(_encoder.encode(m) + b"\n" for m in messages))
        os.rename(aside, final)  # fails if the key appeared meanwhile with files in it
    except OSError as exc:
        shutil.rmtree(aside, ignore_errors=True)
        code = ErrorCode.E_INSTANCE_EXISTS if final.exists() else ErrorCode.E_CONTROL_BAD_REQUEST
        raise ForkFailed(code, f"cannot write instance {new_key!r}: {exc.strerror}") from None
    return final


def fork(args: argparse.Namespace, swarm: str) -> tuple[Fork, Path]:
    try:
        new_key = check_instance_key(args.new_key)
    except ProtocolError as exc:
        raise ForkFailed(ErrorCode.E_AGENT_INVALID_INSTANCE_KEY, f"--as: {exc.message}") from None
    if new_key == args.instance_key:
        raise ForkFailed(ErrorCode.E_INSTANCE_EXISTS, "--as must name a new instance, not KEY")
    layout = layout_of(args)
    conversation = InstanceConversation(layout, swarm, args.instance_key, args.agent)
    planned = plan(conversation, args.at)
    if new_key in _live_keys(args, swarm):
        raise ForkFailed(ErrorCode.E_INSTANCE_EXISTS, f"the daemon runs instance {new_key!r}",
                         "choose another --as")  # fmt: skip
    return planned, write(layout, swarm, new_key, planned)


def swarm_of(args: argparse.Namespace) -> str | None:
    """--swarm, else the running daemon's, else the one the files and the directory name."""
    if getattr(args, "swarm", None):
        return str(args.swarm)
    try:
        return find_daemon(args).swarm
    except ClientError:
        return _pick_swarm(args, localstate.swarms(layout_of(args)))


NO_SWARM = ErrorInfo(
    code=ErrorCode.E_CONTROL_BAD_REQUEST,
    message="several swarms or none have state",
    suggestion="choose one with --swarm S",
)


def run_fork(args: argparse.Namespace, printer: Printer) -> int:
    swarm = swarm_of(args)
    if swarm is None:
        printer.error(NO_SWARM)
        return EXIT_USAGE
    try:
        made, where = fork(args, swarm)
    except (ForkFailed, NoSuchInstance) as exc:
        printer.error(exc.error)
        return EXIT_RUNTIME if exc.error.code == ErrorCode.E_INSTANCE_NOT_FOUND else EXIT_USAGE
    count = sum(len(m) for m in made.messages.values())
    sys.stdout.write(f"forked {args.instance_key} at turn {made.number} ({made.turn}) as "
                     f"{args.new_key}: {count} message(s) in {where}\n")  # fmt: skip
    return EXIT_OK
