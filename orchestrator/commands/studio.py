"""`goondan studio [--listen 127.0.0.1:8791] [--swarm S] [--allow-actions]
[--token-file F | --no-token] [--allowed-host NAME]`: the web dashboard (orchestrator/studio/,
ARCHITECTURE.md §14).

A separate process: it talks to the running daemon through the control socket and reads the
state files, so it works with a daemon or without (then the process table is empty and actions
fail with E_DAEMON_NOT_RUNNING). Read-only unless --allow-actions. It binds to loopback by
default and needs a token on every interface: loopback is no boundary between the users of one
machine, and the page shows conversations and (with --allow-actions) approves calls. The token
is random, printed at start in the URL to open, or the first line of --token-file; --no-token
(loopback only, for a throwaway session) serves anyone on this machine and says so loudly.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import os
import secrets
import socket
import stat
import sys

from orchestrator.control import localstate
from orchestrator.control.client import ClientError, find_daemon, layout_of, pick_swarm
from orchestrator.evals import runs
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME, EXIT_USAGE
from protocol.errors import ErrorCode

DEFAULT_LISTEN = "127.0.0.1:8791"
READABLE_BY_OTHERS = 0o044
"""A --token-file with these mode bits is refused: its group and every other user hold it."""


class _Studio:
    name = "studio"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--listen",
            metavar="HOST:PORT",
            default=DEFAULT_LISTEN,
            help=f"where to serve (default {DEFAULT_LISTEN}; port 0: any)",
        )
        parser.add_argument(
            "--allow-actions",
            action="store_true",
            help="allow restart/stop and answering calls from the page",
        )
        parser.add_argument(
            "--token-file", metavar="F", help="the token (its first line) that guards the page"
        )
        parser.add_argument(
            "--no-token",
            action="store_true",
            help="no token (loopback only): anyone on this machine may read conversations "
            "(and act with --allow-actions)",
        )
        parser.add_argument(
            "--allowed-host",
            metavar="NAME",
            action="append",
            default=[],
            help="a Host name to accept besides IP addresses and localhost "
            "(a reverse proxy's public name)",
        )

    def run(self, args: argparse.Namespace) -> int:
        try:
            import starlette  # noqa: F401
            import uvicorn  # noqa: F401
        except ImportError as exc:
            install = "pip install 'goondan-daemon[studio]'"
            _say(f"E_NOT_IMPLEMENTED {exc.name} is not installed: {install}")
            return EXIT_RUNTIME
        parsed = _listen(args.listen)
        if parsed is None:
            _say(f"--listen {args.listen!r} is not HOST:PORT (e.g. {DEFAULT_LISTEN})")
            return EXIT_USAGE
        host, port = parsed
        try:
            swarm = _swarm(args)
        except ClientError as exc:
            _say(f"{exc.error.code} {exc.error.message}: {exc.error.suggestion}")
            return EXIT_USAGE
        if swarm is None:
            known = ", ".join(localstate.swarms(layout_of(args))) or "none"
            _say(
                f"no daemon runs and the files name several swarms or none ({known}): "
                "choose one with --swarm S"
            )
            return EXIT_USAGE
        token = _token(args, host)
        if isinstance(token, int):
            return token
        try:
            sock = _bind(host, port)
        except OSError as exc:
            _say(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
            return EXIT_RUNTIME
        url = _url(sock, token)
        if token is None:
            _warn_no_token(args, url)
        mode = "actions allowed" if args.allow_actions else "read-only"
        mode += "" if token else ", NO TOKEN"
        print(f"goondan studio: {url} (swarm {swarm}, {mode}; Ctrl-C to stop)", flush=True)
        return _serve(args, swarm, token, sock)


def _serve(args: argparse.Namespace, swarm: str, token: str | None, sock: socket.socket) -> int:
    from orchestrator.studio.app import Studio
    from orchestrator.studio.guard import Policy
    from orchestrator.studio.hub import ProcessHub
    from orchestrator.studio.link import DaemonLink
    from orchestrator.studio.runtime import RuntimeIndex
    from orchestrator.studio.serve import serve

    layout = layout_of(args)
    link = DaemonLink(layout, swarm)
    studio = Studio(
        layout=layout,
        swarm=swarm,
        link=link,
        index=RuntimeIndex(layout, swarm),
        hub=ProcessHub(link),
        allow_actions=args.allow_actions,
    )
    policy = Policy(
        token=token,
        allow_actions=args.allow_actions,
        allowed_hosts=frozenset(h.lower() for h in args.allowed_host),
    )
    with contextlib.suppress(KeyboardInterrupt):
        serve(studio, policy, sock)
    return EXIT_OK


def _say(text: str) -> None:
    sys.stderr.write(f"goondan studio: {text}\n")


def _listen(text: str) -> tuple[str, int] | None:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        return None
    return host.strip("[]") or "127.0.0.1", int(port)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _token(args: argparse.Namespace, host: str) -> str | int | None:
    """The token the page needs (None: --no-token), or an exit code."""
    if args.no_token:
        if args.token_file:
            _say("--no-token and --token-file contradict each other: choose one")
            return EXIT_USAGE
        if not _loopback(host):
            _say(
                f"--no-token is for a loopback Studio only; {host} is reachable from other "
                "machines: drop --no-token (a token is made for you) or use --token-file"
            )
            return EXIT_USAGE
        return None
    if args.token_file:
        return _token_from(str(args.token_file))
    return secrets.token_urlsafe(32)


def _token_from(path: str) -> str | int:
    """The first line of a token file only its owner can read, or an exit code."""
    try:
        with open(path, encoding="utf-8") as file:
            mode = os.fstat(file.fileno()).st_mode
            token = (file.readline(4096) if not mode & READABLE_BY_OTHERS else "").strip()
    except (OSError, UnicodeDecodeError) as exc:
        _say(f"--token-file {path}: cannot read a token from it ({exc})")
        return EXIT_USAGE
    if mode & READABLE_BY_OTHERS:  # any local user who reads it holds Studio
        _say(f"--token-file {path}: other users can read it (mode {stat.S_IMODE(mode):o}): "
             f"chmod 600 {path}")  # fmt: skip
        return EXIT_USAGE
    if len(token) < 16:
        _say(f"--token-file {path}: the token must be at least 16 characters")
        return EXIT_USAGE
    return token


def _warn_no_token(args: argparse.Namespace, url: str) -> None:
    """--no-token, said where the person who started it looks (stderr) and as a log line."""
    import structlog

    from bundles import logsetup

    what = "read conversations and logs" + (
        " and approve, deny, answer calls, restart and stop processes" if args.allow_actions else ""
    )
    _say(f"WARNING --no-token: anyone on this machine (any user, any process) can {what}")
    logsetup.configure(
        structlog.processors.JSONRenderer(), logger_factory=structlog.PrintLoggerFactory(sys.stderr)
    )
    structlog.get_logger().warning(
        "studio_no_token", url=url, allow_actions=bool(args.allow_actions)
    )


def _swarm(args: argparse.Namespace) -> str | None:
    """The swarm to show: --swarm, the one running daemon's, else (no daemon) the one the
    files name, else that of the newest kept eval run (a root with evals only: their view
    needs no swarm of its own); ClientError when several daemons run."""
    if args.swarm:
        return str(args.swarm)
    try:
        return find_daemon(args).swarm
    except ClientError as exc:
        if exc.error.code != ErrorCode.E_DAEMON_NOT_RUNNING:
            raise  # several run: which one is the user's to say
        layout = layout_of(args)
        found = localstate.swarms(layout)
        picked = pick_swarm(args, found)
        if picked is not None or found:
            return picked
        kept = runs.reports(layout)[:1]
        return str(kept[0]["swarm"]) if kept and isinstance(kept[0].get("swarm"), str) else None


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.set_inheritable(False)
    return sock


def _url(sock: socket.socket, token: str | None) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


COMMAND = _Studio()
