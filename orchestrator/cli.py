"""`goondan` / `gdn`: the command line (ARCHITECTURE.md §9). Exit codes 0 ok, 1 runtime error, 2
usage.

`run` starts the daemon in the foreground; the other commands are clients of a running daemon
(found through the state root and `--swarm`) or work on files only (`validate`, `init`).
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

from orchestrator import __version__
from orchestrator.exitcodes import EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:  # argparse (with re and gettext) loads when a parser is built
    import argparse

    class Command(Protocol):  # annotations only: a Protocol class costs every command its time
        @property
        def name(self) -> str: ...

        def configure(self, parser: argparse.ArgumentParser) -> None: ...
        def run(self, args: argparse.Namespace) -> int: ...


class CommandInfo(NamedTuple):
    """A command as `--help` lists it; its module (`orchestrator.commands.<name>`, exporting
    `COMMAND`) is imported only when the command runs, so `goondan --version` or `goondan
    send` never pay for the daemon's imports, and a broken command cannot break the rest."""

    name: str
    help: str

    def load(self) -> Command:
        from protocol.norich import WithoutRich

        with WithoutRich():  # the command's imports bring structlog: protocol/norich.py says why
            module = importlib.import_module(f"orchestrator.commands.{self.name}")
        command: Command = module.COMMAND
        return command


COMMANDS = (
    CommandInfo("init", "write a new bundle that validates and runs offline (scripted model)"),
    CommandInfo("validate", "check a bundle and print every error (exit 0 valid, 2 invalid)"),
    CommandInfo("run", "start the orchestrator in the foreground"),
    CommandInfo("send", "send text to an agent of the running daemon and print the reply"),
    CommandInfo("eval", "run an eval file's cases against the bundle; report, exit 1 on a failure"),
    CommandInfo("status", "show the orchestrator and its process table"),
    CommandInfo("instance", "list, show (the conversation) or delete agent instances"),
    CommandInfo("restart", "gracefully restart agent processes, keeping history"),
    CommandInfo("stop", "stop the running daemon gracefully"),
    CommandInfo("logs", "read logs and runtime events merged by time (a cluster: every node's)"),
    CommandInfo("calls", "list or resolve pending client-side (deferred) tool calls"),
    CommandInfo("studio", "serve the web dashboard (processes, graph, conversations, traces)"),
    CommandInfo("service", "systemd helpers: print-unit writes a unit file for a bundle to stdout"),
    CommandInfo("cluster", "cluster mode: status of the swarm's nodes, drain a node"),
    CommandInfo("doctor", "check this machine and the bundle (exit 1 when a required check fails)"),
    CommandInfo("package", "goondan packages (Python distributions): list the installed ones"),
)


def all_commands() -> dict[str, Command]:
    return {info.name: info.load() for info in COMMANDS}


def version() -> str:
    return __version__


def help_formatter(prog: str) -> argparse.HelpFormatter:
    """argparse's own formatter, at the width argparse would choose (the terminal's, or
    $COLUMNS, less 2), found without shutil: argparse asks shutil.get_terminal_size for it
    at every add_argument, and importing shutil (bz2, lzma, fnmatch) was ~2 ms of a send."""
    import argparse

    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return argparse.HelpFormatter(prog, width=(columns or 80) - 2)


def common_options() -> argparse.ArgumentParser:
    """Options every command accepts after its name."""
    import argparse

    common = argparse.ArgumentParser(add_help=False, formatter_class=help_formatter)
    common.add_argument(
        "--state-root",
        metavar="DIR",
        help="state directory (default: $GOONDAN_STATE_ROOT or ~/.goondan)",
    )
    common.add_argument("--swarm", metavar="S", help="the swarm to act on when several run")
    return common


def build_parser(
    loaded: Mapping[str, Command], listed: Sequence[CommandInfo] = COMMANDS
) -> argparse.ArgumentParser:
    """The commands `listed` (default: every one, as `--help` shows them); only those in
    `loaded` get their options and a runner."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="goondan",
        formatter_class=help_formatter,
        description=(
            "Run swarms of LLM agents as supervised OS processes. "
            "Exit codes: 0 ok, 1 runtime error, 2 usage error or invalid bundle."
        ),
    )
    parser.add_argument("--version", action="version", version=f"goondan {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    common = common_options()
    for info in listed:
        p = sub.add_parser(info.name, help=info.help, description=info.help, parents=[common],
                           formatter_class=help_formatter)  # fmt: skip
        cmd = loaded.get(info.name)
        if cmd is not None:
            cmd.configure(p)
            p.set_defaults(_command=cmd)
    return parser


def _chosen(argv: Sequence[str]) -> dict[str, Command]:
    """The command named by the first word of `argv`, loaded (none for `--version`)."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return {info.name: info.load() for info in COMMANDS if info.name == word}


QUICK_EXIT = frozenset({"send"})
"""Commands whose process ends at `os._exit` once its output is flushed: the interpreter's
teardown (freeing every module it imported) was ~10 ms of a ~70 ms `goondan send`, which
leaves nothing to finish (its socket is closed, it starts no thread or child)."""


def _flushed() -> bool:
    """stdout and stderr written out; False when that failed (a full disk, a closed stream):
    then the interpreter's own exit reports it and exits 120, as it always did."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return False
    return True


def _listed(argv: Sequence[str], chosen: Mapping[str, Command]) -> Sequence[CommandInfo]:
    """The commands the parser needs: only the chosen one when argv starts with its name (a
    sub-parser's help and errors do not name the others; building the other 15 took ~1 ms of
    `goondan send`), else every one (`goondan --help`, a misspelt command)."""
    if argv and argv[0] in chosen:
        return [info for info in COMMANDS if info.name == argv[0]]
    return COMMANDS


def _standard_streams() -> None:
    """A standard stream started closed (`goondan send hi >&-`) is /dev/null: Python leaves it
    None (a crash at the first print), and the next file or socket opened would take its
    number and receive what was printed to it."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is not None:
            continue
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        setattr(sys, name, open(fd, "r" if fd == 0 else "w", closefd=False))  # noqa: SIM115


def main(argv: Sequence[str] | None = None) -> int:
    """The `goondan` command; `argv` None means this process is the command (a caller passing
    argv, like a test, keeps its own signal handling)."""
    entry = argv is None
    if entry:
        _standard_streams()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv == ["--version"]:  # what scripts and health checks call: answered without a parser
        print(f"goondan {version()}")
        return EXIT_OK
    chosen = _chosen(argv)
    if entry and "run" not in chosen:
        # `goondan send ... | head -1`: end quietly when the reader has gone, like other Unix
        # tools (the daemon keeps Python's default: a closed pipe is an error it handles)
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    parser = build_parser(chosen, _listed(argv, chosen))
    args = parser.parse_args(argv)
    command: Command | None = getattr(args, "_command", None)
    if command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    code = command.run(args)
    if entry and command.name in QUICK_EXIT and _flushed():
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
