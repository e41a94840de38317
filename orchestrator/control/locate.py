"""Find the running daemon a CLI command means, and report what went wrong, on the standard
library alone (`goondan send` imports neither msgspec nor pyzmq; `orchestrator.control.client`
builds the other commands' typed view on this). Its records are NamedTuples: dataclasses
imports inspect, ~6 ms of a send.

The daemon is found through `<state_root>/run/<swarm>/active.json` (and `--swarm` when several
run); a pid that no longer exists means no daemon, whatever the files say.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from orchestrator.control import runpointer
from orchestrator.control.zmtp import E_CONTROL_TIMEOUT, ZmtpError
from protocol.endpoints import StateLayout
from protocol.error_codes import ErrorCode
from protocol.pids import pid_alive

Active = dict[str, Any]
"""An `active.json` as the daemon wrote it (protocol.control.OrchestratorInfo's camelCase
fields), its fields' types checked by `read_active`."""

_ACTIVE_FIELDS = {"pid": int, "swarm": str, "bundle": str, "startedAt": str, "version": str,
                  "stateRoot": str}  # fmt: skip


if TYPE_CHECKING:  # annotations only: a Protocol class costs its import time in every send

    class Coded(Protocol):
        """A coded error as a user reads it (protocol.errors.ErrorInfo has these fields too)."""

        @property
        def code(self) -> str: ...
        @property
        def message(self) -> str: ...
        @property
        def suggestion(self) -> str | None: ...

    class Replied(Protocol):
        @property
        def error(self) -> Coded | None: ...


class Problem(NamedTuple):
    code: str
    message: str
    suggestion: str | None = None


class ClientError(Exception):
    def __init__(self, code: str, message: str, suggestion: str | None = None) -> None:
        super().__init__(message)
        self.error = Problem(code, message, suggestion)


class Printer(NamedTuple):
    command: str

    def error(self, error: Coded) -> None:
        hint = f" ({error.suggestion})" if error.suggestion else ""
        sys.stderr.write(f"goondan {self.command}: {error.code} {error.message}{hint}\n")

    def reply_error(self, reply: Replied) -> None:
        self.error(reply.error or Problem(ErrorCode.E_CONTROL_BAD_REQUEST, "failed"))


def read_active(path: Path) -> Active | None:
    """The daemon's `active.json` at `path`; None when it is missing or not one."""
    try:
        info = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    if not (
        isinstance(info, dict)
        and all(_is(info.get(name), kind) for name, kind in _ACTIVE_FIELDS.items())
        and isinstance(info.get("endpoints", {}), dict)
        and all(isinstance(v, str) for v in info.get("endpoints", {}).values())
        and isinstance(info.get("node", ""), str)
    ):
        return None
    return info


def _is(value: object, kind: type) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool)


def read_token(control_endpoint: str) -> str:
    """The token beside the control socket of `ipc://<run dir>/control.sock` ("" if none)."""
    path = Path(control_endpoint.removeprefix("ipc://")).with_name("control.token")
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def layout_of(args: argparse.Namespace) -> StateLayout:
    root = getattr(args, "state_root", None)
    return StateLayout.from_env(Path(root) if root else None)


def _running(layout: StateLayout) -> list[Active]:
    # the usual run dirs, plus those a daemon under systemd (RUNTIME_DIRECTORY) points to
    roots = dict.fromkeys((layout.run_paths("x").run_dir.parent, layout.root / "run"))
    found = []
    for active in dict.fromkeys(f for root in roots for f in runpointer.active_files(root)):
        info = read_active(active)
        if info is not None and pid_alive(info["pid"]):
            found.append(info)
    return found


def swarms_here(directory: Path | None = None) -> list[str]:
    """The swarms of the bundle in `directory` (default: the working directory), read from its
    goondan.yaml alone (a quick look, not a load: a broken bundle just names none)."""
    main = (directory or Path.cwd()) / "goondan.yaml"
    try:
        text = main.read_text(encoding="utf-8")
    except OSError:
        return []
    names = []
    for doc in text.split("\n---"):
        if re.search(r"^kind:\s*Swarm\s*$", doc, re.MULTILINE):
            found = re.search(r"^metadata:\s*(?:\{\s*name:\s*([\w.-]+)|\n\s+name:\s*([\w.-]+))",
                              doc, re.MULTILINE)  # fmt: skip
            if found:
                names.append(found.group(1) or found.group(2))
    return names


def pick_swarm(args: argparse.Namespace, known: list[str]) -> str | None:
    """The swarm a command acts on without a daemon: --swarm, else the bundle's here, else the
    only one `known`; None when that is ambiguous."""
    chosen: str | None = getattr(args, "swarm", None)
    if chosen:
        return chosen
    here = [s for s in swarms_here() if s in known] or swarms_here()
    if len(here) == 1:
        return here[0]
    return known[0] if len(known) == 1 else None


def find_daemons(args: argparse.Namespace) -> list[Active]:
    """The daemons a command means: the --swarm one, else inside a bundle directory that
    bundle's, else every running one (at least one, or ClientError)."""
    layout = layout_of(args)
    swarm = getattr(args, "swarm", None)
    if swarm:
        info = read_active(layout.run_paths(swarm).active_json)
        if info is None or not pid_alive(info["pid"]):
            pointed = runpointer.read(runpointer.pointer_path(layout, swarm))
            info = read_active(pointed) if pointed is not None else None
        if info is None or not pid_alive(info["pid"]):
            raise ClientError(
                ErrorCode.E_DAEMON_NOT_RUNNING,
                f"no goondan daemon runs swarm {swarm!r} under {layout.root}",
                "start it with `goondan run`, or pass the right --state-root",
            )
        return [info]
    running = _running(layout)
    here = swarms_here()
    if len(running) > 1 and here:  # inside a bundle directory: that bundle's swarm
        running = [i for i in running if i["swarm"] in here] or running
    if not running:
        raise ClientError(
            ErrorCode.E_DAEMON_NOT_RUNNING,
            f"no goondan daemon is running under {layout.root}",
            "start one with `goondan run BUNDLE`, or pass --state-root / --swarm",
        )
    return sorted(running, key=lambda i: str(i["swarm"]))


def find_daemon(args: argparse.Namespace) -> Active:
    """The one daemon a command acts on (ClientError when several could be meant)."""
    running = find_daemons(args)
    if len(running) > 1:
        names = ", ".join(i["swarm"] for i in running)
        raise ClientError(
            ErrorCode.E_CONTROL_BAD_REQUEST,
            f"several daemons run under {layout_of(args).root}: {names}",
            "choose one with --swarm S",
        )
    return running[0]


def control_endpoint(info: Active) -> str:
    """The daemon's control socket (ClientError when its active.json names none)."""
    endpoint = info.get("endpoints", {}).get("control")
    if not endpoint:
        raise ClientError(ErrorCode.E_DAEMON_NOT_RUNNING,
                          f"the daemon (pid {info['pid']}) names no control socket")  # fmt: skip
    return str(endpoint)


def call_failed(exc: ZmtpError, info: Active, timeout: float) -> ClientError:
    """What a failed exchange with the daemon `info` tells the user."""
    if exc.code == E_CONTROL_TIMEOUT:
        message = f"the daemon (pid {info['pid']}) did not answer within {timeout:g} s"
        return ClientError(exc.code, message)
    return ClientError(exc.code, exc.message)


def new_request_id() -> str:
    """32 random hex digits (the length of a uuid4's hex; the uuid module is ~0.5 ms of a
    send)."""
    return os.urandom(16).hex()
