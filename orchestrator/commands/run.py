"""`goondan run [BUNDLE] [--input TEXT | --input-file F] [--env-file F] [--log-format F]`.

Loads and validates the bundle (invalid: every error on stderr, exit 2, nothing started),
then runs the daemon in the foreground until SIGTERM/SIGINT or `goondan stop`. With
`--input`, it sends that one input to the entry agent, prints the reply and exits 0 after
a graceful shutdown (1 if the reply is an error). A turn that makes a client-side call keeps
the daemon up until the call is answered (`goondan calls resolve` from another terminal; the
command is printed on stderr), then prints the resumed turn's reply.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from bundles.diagnostics import BundleError, Severity
from bundles.kinds import ClusterPolicy, SwarmSpec
from bundles.loader import inspect_bundle
from bundles.model import Bundle, Resource
from bundles.packages.lock import FROZEN_HELP, frozen
from orchestrator import daemon
from orchestrator.cluster.options import PASSWORD_ENV, ClusterConfigError, ClusterOptions
from orchestrator.cluster.options import options as cluster_options
from orchestrator.control.client import Printer, layout_of
from orchestrator.control.rundir import AlreadyRunning
from orchestrator.control.server import ControlContext
from orchestrator.deepcheck import deep_check
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME, EXIT_USAGE
from orchestrator.ingress.send import SendFailed, follow, pending_call, send_and_wait
from protocol.control import SendText
from protocol.errors import ErrorInfo, ProtocolError
from protocol.events import AgentEvent
from protocol.jsontypes import JsonObject


def one_shot(text: str, printer: Printer) -> daemon.OnStarted:
    async def send(ctx: ControlContext) -> int:
        timeout_ms = ctx.supervisor.settings.request_timeout_ms
        try:
            reply = await send_and_wait(
                ctx, SendText(request_id="run-input", text=text, timeout_ms=timeout_ms)
            )
            # a client-side call: the daemon stays up until it is answered from elsewhere
            while isinstance(reply, AgentEvent) and (call := pending_call(reply)) is not None:
                _say_how_to_answer(call)
                reply = await follow(ctx, reply, CALL_WAIT_SECONDS)
        except SendFailed as exc:
            printer.error(ErrorInfo(code=exc.code, message=exc.message))
            return EXIT_RUNTIME
        if not isinstance(reply, AgentEvent):
            return EXIT_OK
        if reply.error is not None:
            printer.error(reply.error)
            return EXIT_RUNTIME
        print(reply.input, flush=True)
        return EXIT_OK

    return send


CALL_WAIT_SECONDS = 24 * 3600.0
"""How long `run --input` waits for a client-side call (the call's own TTL ends it sooner)."""


def _say_how_to_answer(call: JsonObject) -> None:
    method, call_id = call.get("method"), call.get("id")
    params = json.dumps(call.get("params"), ensure_ascii=False)
    sys.stderr.write(
        f"goondan run: the turn waits for call {call_id} ({method} {params}); this run keeps the "
        f"daemon up until it is answered from another terminal:\n"
        f"  goondan calls resolve {call_id} --result JSON   (or --error CODE --message M)\n"
        "Ctrl-C stops the daemon; the call stays pending on disk and the next run resumes it.\n"
    )
    sys.stderr.flush()


def _check_entries(bundle: Bundle, swarm: str, env_files: tuple[Path, ...], root: Path) -> None:
    """`validate --deep`'s import of every entry the swarm uses: a tool file without
    `handlers` or an export without a handler stops the start, not the first turn."""
    found = deep_check(bundle.path, env_files=env_files, swarm=swarm, state_root=root)
    errors = [d for d in found if d.severity is Severity.ERROR]
    for warning in (d for d in found if d.severity is not Severity.ERROR):
        print(f"warning: {warning}", file=sys.stderr)
    if errors:
        raise BundleError(errors)


def _read_input(args: argparse.Namespace) -> str | None:
    if args.input_file is not None:
        return Path(args.input_file).read_text(encoding="utf-8")
    text: str | None = args.input
    return text


def _load(
    args: argparse.Namespace, env_files: tuple[Path, ...], root: Path
) -> tuple[Bundle, Resource[SwarmSpec]]:
    """The bundle and the swarm to run; raises BundleError (warnings are printed) or KeyError
    (no such swarm)."""
    report = inspect_bundle(args.bundle, env_files=env_files, state_root=root)
    if args.frozen:
        report = frozen(report)
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if report.bundle is None:
        raise BundleError(report.errors)
    bundle = report.bundle
    swarm = bundle.swarm(args.swarm)
    if not args.no_entry_check:
        _check_entries(bundle, swarm.name, env_files, root)
    return bundle, swarm


def _cluster_options(args: argparse.Namespace, policy: ClusterPolicy) -> ClusterOptions | None:
    nats_password = os.environ.pop(PASSWORD_ENV, None)  # no agent process inherits it
    if args.cluster is None:
        if args.node or args.nats_creds or args.nats_user or args.insecure_nats:
            raise ClusterConfigError("--node and the --nats-* options need --cluster",
                                     "add --cluster nats://HOST:PORT")  # fmt: skip
        return None
    return cluster_options(args.cluster, args.node, args.nats_creds, policy, args.insecure_nats,
                           args.nats_user, nats_password)  # fmt: skip


class _Run:
    name = "run"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "bundle", nargs="?", default="goondan.yaml", metavar="BUNDLE",
            help="goondan.yaml or its directory (default: ./goondan.yaml)",
        )  # fmt: skip
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--input", metavar="TEXT", help="send one input, print the reply, exit")
        group.add_argument("--input-file", metavar="F", help="like --input, read from file F")
        parser.add_argument(
            "--env-file", action="append", default=[], metavar="F",
            help="KEY=VALUE lines (repeatable; never override the environment)",
        )  # fmt: skip
        parser.add_argument(
            "--log-format", choices=("json", "console"), default="console",
            help="console output format; logs/<swarm>/orchestrator.log is always JSON lines",
        )  # fmt: skip
        parser.add_argument(
            "--no-entry-check", action="store_true",
            help="skip importing every tool/extension/connector entry in a throwaway process "
            "before starting (about 0.3 s); a broken entry then shows as its agent's start error",
        )  # fmt: skip
        parser.add_argument("--frozen", action="store_true", help=FROZEN_HELP)
        parser.add_argument(
            "--watch", action="store_true",
            help="reload the bundle when its files change; restart only the affected processes",
        )  # fmt: skip
        cluster = parser.add_argument_group("cluster mode (docs/cluster.md)")
        cluster.add_argument(
            "--cluster", metavar="URLS",
            help="run as one node of the swarm's cluster: NATS servers nats://HOST:PORT[,...] "
            "(tls://HOST:PORT for TLS; nats://USER:PASSWORD@HOST:PORT, or see --nats-user); "
            "needs goondan-daemon[cluster]",
        )  # fmt: skip
        cluster.add_argument("--node", metavar="NAME", help="this node's name in the cluster")
        cluster.add_argument(
            "--nats-creds", metavar="FILE", help="NATS user credentials (.creds) to connect with"
        )
        cluster.add_argument(
            "--nats-user", metavar="USER",
            help=f"this node's NATS user; its password in the environment variable {PASSWORD_ENV}",
        )  # fmt: skip
        cluster.add_argument(
            "--insecure-nats", action="store_true",
            help="connect to NATS without credentials (refused otherwise): any client of that "
            "server can then read conversations and answer calls; logged at every start",
        )  # fmt: skip

    def run(self, args: argparse.Namespace) -> int:
        printer = Printer("run")
        try:
            text = _read_input(args)
        except OSError as exc:
            print(f"goondan run: cannot read --input-file: {exc}", file=sys.stderr)
            return EXIT_USAGE
        layout = layout_of(args)
        env_files = tuple(Path(f) for f in args.env_file)
        try:
            bundle, swarm = _load(args, env_files, layout.root)
            cluster = _cluster_options(args, swarm.spec.policy.cluster)
        except BundleError as exc:
            for diag in exc.diagnostics:
                print(str(diag), file=sys.stderr)
            print(f"{len(exc.diagnostics)} error(s); nothing was started", file=sys.stderr)
            return EXIT_USAGE
        except KeyError as exc:
            print(f"goondan run: {exc.args[0]}; nothing was started", file=sys.stderr)
            return EXIT_USAGE
        except ClusterConfigError as exc:
            print(f"goondan run: {exc.code}: {exc.message} ({exc.suggestion})", file=sys.stderr)
            return EXIT_USAGE
        opts = daemon.DaemonOptions(
            bundle=bundle,
            swarm=swarm,
            layout=layout,
            env_files=env_files,
            log_format=args.log_format,
            quiet=text is not None,
            on_started=one_shot(text, printer) if text is not None else None,
            watch=args.watch,
            cluster=cluster,
        )
        try:
            return daemon.run(opts)
        except AlreadyRunning as exc:
            print(f"goondan run: {exc}", file=sys.stderr)
            return EXIT_RUNTIME
        except ProtocolError as exc:
            print(f"goondan run: {exc.code} {exc.message}", file=sys.stderr)
            return EXIT_USAGE


COMMAND = _Run()
