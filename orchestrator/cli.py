"""`goondan` / `gdn`: the command line (ARCHITECTURE.md §9). Exit codes 0 ok, 1 runtime error, 2
usage.

`run` starts the daemon in the foreground; the other commands are clients of a running daemon
(found through the state root and `--swarm`) or work on files only (`validate`, `init`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import Protocol

from orchestrator.exitcodes import EXIT_USAGE


class Command(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def help(self) -> str: ...

    def configure(self, parser: argparse.ArgumentParser) -> None: ...
    def run(self, args: argparse.Namespace) -> int: ...


def _commands() -> list[Command]:
    # Imported here so `goondan --help` stays fast and a broken command cannot break the rest.
    from orchestrator.commands import calls as calls_cmd
    from orchestrator.commands import doctor as doctor_cmd
    from orchestrator.commands import init as init_cmd
    from orchestrator.commands import instance, restart, run, send, status, stop, validate
    from orchestrator.commands import logs as logs_cmd
    from orchestrator.commands import service as service_cmd

    return [
        init_cmd.COMMAND,
        validate.COMMAND,
        run.COMMAND,
        send.COMMAND,
        status.COMMAND,
        instance.COMMAND,
        restart.COMMAND,
        stop.COMMAND,
        logs_cmd.COMMAND,
        calls_cmd.COMMAND,
        service_cmd.COMMAND,
        doctor_cmd.COMMAND,
    ]


def version() -> str:
    try:
        return metadata.version("goondan")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def common_options() -> argparse.ArgumentParser:
    """Options every command accepts after its name."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--state-root",
        metavar="DIR",
        help="state directory (default: $GOONDAN_STATE_ROOT or ~/.goondan)",
    )
    common.add_argument("--swarm", metavar="S", help="the swarm to act on when several run")
    return common


def build_parser(commands: Sequence[Command]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="goondan",
        description=(
            "Run swarms of LLM agents as supervised OS processes. "
            "Exit codes: 0 ok, 1 runtime error, 2 usage error or invalid bundle."
        ),
    )
    parser.add_argument("--version", action="version", version=f"goondan {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    common = common_options()
    for cmd in commands:
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help, parents=[common])
        cmd.configure(p)
        p.set_defaults(_command=cmd)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(_commands())
    args = parser.parse_args(argv)
    command: Command | None = getattr(args, "_command", None)
    if command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    return command.run(args)


if __name__ == "__main__":
    sys.exit(main())
