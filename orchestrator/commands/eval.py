"""`goondan eval FILE [--bundle B] [--concurrency N] [--repeat K] [--junit F] [--json F]
[--compare PREV.json] [--record DIR | --replay DIR]`: a swarm's regression suite
(docs/guides/evals.md).

The bundle is loaded as `run` loads it and a daemon is started for the run under a temporary
state root (nothing of the user's state is read); each case (x `--repeat`) is a fresh instance
fed through `send`'s ingress, N at a time. The run is kept under the user's state root
(`evals/<run id>/`, evals/runs.py): its report, and its daemon's instances and logs, for Studio's
Evals view and `goondan logs --trace`. Exit 0 every case passes, 1 any fails, 2 a bad eval file
or bundle.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bundles.diagnostics import BundleError
from bundles.loader import inspect_bundle
from orchestrator.control import client
from orchestrator.control.server import ControlContext
from orchestrator.evals import report, runs
from orchestrator.evals.cost import Prices, prices_of
from orchestrator.evals.judge import JudgeClient
from orchestrator.evals.runner import Result, run_all
from orchestrator.evals.spec import EvalFile, EvalFileError, load
from orchestrator.evals.target import LocalTarget, RemoteTarget, Target
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME, EXIT_USAGE
from protocol.endpoints import StateLayout
from protocol.launch import MODEL_RECORDING_ENV

RUN_TIMEOUT_S = 3600.0


@dataclass(slots=True)
class _Ran:
    """What a run did: its exit code so far, its results, and what to keep of it."""

    code: int
    results: list[Result] = field(default_factory=list)
    swarm: str = ""
    bundle: str = ""
    state: Path | None = None
    """The run's own daemon's state root (None with --attach: the cases are that daemon's)."""


BAR = 30


def progress_line(done: int, total: int) -> str:
    filled = BAR * done // total if total else BAR
    return f"goondan eval [{'#' * filled}{'.' * (BAR - filled)}] {done}/{total} cases"


def _progress(done: int, total: int) -> None:
    """A live bar on a terminal (stderr); nothing when piped, as in CI logs."""
    if sys.stderr.isatty():
        sys.stderr.write(f"\r{progress_line(done, total)}")
        sys.stderr.write("\n" if done == total else "")
        sys.stderr.flush()


def _judge(spec: EvalFile, bundle: Path, state_root: Path) -> JudgeClient | None:
    """The judge worker's client when a case has a `judge` (it starts at the first verdict)."""
    if not any("judge" in case.expect for case in spec.cases):
        return None
    return JudgeClient(bundle, state_root)


def _runner(
    spec: EvalFile,
    args: argparse.Namespace,
    out: list[Result],
    judge: JudgeClient | None,
    prices: Prices,
) -> Callable[[ControlContext | Target], Coroutine[Any, Any, int]]:
    async def go(ctx: ControlContext | Target) -> int:
        target = LocalTarget(ctx) if isinstance(ctx, ControlContext) else ctx
        try:
            async with asyncio.timeout(RUN_TIMEOUT_S):
                out.extend(await run_all(target, spec, args.concurrency, args.repeat, _progress,
                                         judge, prices))  # fmt: skip
        finally:
            if judge is not None:
                await judge.aclose()
        return EXIT_OK

    return go


@contextlib.contextmanager
def _recording(args: argparse.Namespace) -> Iterator[None]:
    """`--record/--replay DIR` for every Model of the run: the environment the daemon's agent
    processes and the judge worker inherit (agent_process/models/recording.py)."""
    mode, where = ("record", args.record) if args.record is not None else ("replay", args.replay)
    if where is None:
        yield
        return
    before = os.environ.get(MODEL_RECORDING_ENV)
    os.environ[MODEL_RECORDING_ENV] = f"{mode}:{Path(where).absolute()}"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(MODEL_RECORDING_ENV, None)
        else:
            os.environ[MODEL_RECORDING_ENV] = before


def _taping_problem(args: argparse.Namespace) -> str | None:
    if (args.record or args.replay) and args.attach:
        # the running daemon's agents were started without the setting
        return "--record/--replay need the daemon eval starts; not with --attach"
    if args.replay is not None and not Path(args.replay).is_dir():
        return f"--replay {args.replay}: not a directory"
    return None


def _previous(path: str | None) -> dict[str, Any] | None:
    if path is None:
        return None
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


class _Eval:
    name = "eval"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("file", metavar="FILE", help="the eval file (YAML: agent, cases)")
        parser.add_argument(
            "--bundle", default="goondan.yaml", metavar="B",
            help="goondan.yaml or its directory (default: ./goondan.yaml)",
        )  # fmt: skip
        parser.add_argument(
            "--concurrency", type=int, default=4, metavar="N",
            help="cases run at once, each in its own instance (default 4)",
        )  # fmt: skip
        parser.add_argument(
            "--repeat", type=int, default=1, metavar="K",
            help="run each case K times and report its pass rate",
        )  # fmt: skip
        parser.add_argument("--junit", metavar="F", help="write a JUnit XML report to F")
        parser.add_argument("--json", metavar="F", help="write a JSON report to F")
        parser.add_argument(
            "--compare", metavar="PREV",
            help="list regressed/improved cases against an earlier --json report",
        )  # fmt: skip
        parser.add_argument(
            "--attach", action="store_true",
            help="run the cases in the daemon already running the bundle's swarm (--state-root)",
        )  # fmt: skip
        parser.add_argument(
            "--keep-runs", type=int, default=runs.KEEP, metavar="N",
            help=f"keep the newest N runs under the state root's evals/ for Studio "
            f"(default {runs.KEEP}; 0 keeps none, this one included)",
        )  # fmt: skip
        taping = parser.add_mutually_exclusive_group()
        taping.add_argument(
            "--record", metavar="DIR",
            help="store every model response in DIR (keyed by its request) for --replay",
        )  # fmt: skip
        taping.add_argument(
            "--replay", metavar="DIR",
            help="serve model responses from DIR instead of the providers (offline, no tokens)",
        )  # fmt: skip

    def run(self, args: argparse.Namespace) -> int:
        if args.concurrency < 1 or args.repeat < 1 or args.keep_runs < 0:
            print("goondan eval: --concurrency and --repeat must be >= 1, --keep-runs >= 0",
                  file=sys.stderr)  # fmt: skip
            return EXIT_USAGE
        try:
            spec = load(Path(args.file))
            previous = _previous(args.compare)
        except EvalFileError as exc:
            for error in exc.errors:
                print(f"{exc.path}:{error}", file=sys.stderr)
            print(f"{len(exc.errors)} error(s); no case was run", file=sys.stderr)
            return EXIT_USAGE
        except (OSError, ValueError) as exc:
            print(f"goondan eval: cannot read --compare: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if (problem := _taping_problem(args)) is not None:
            print(f"goondan eval: {problem}", file=sys.stderr)
            return EXIT_USAGE
        started = time.time()
        if args.attach:
            ran = self._run_attached(args, spec)
            return ran.code if ran.code != EXIT_OK else self._report(args, ran, started, previous)
        with _recording(args), tempfile.TemporaryDirectory(prefix="goondan-eval-") as root:
            ran = self._run_daemon(args, spec, Path(root))
            # reported inside: the run's instances and logs move from its temporary root
            return ran.code if ran.code != EXIT_OK else self._report(args, ran, started, previous)

    def _run_daemon(self, args: argparse.Namespace, spec: EvalFile, root: Path) -> _Ran:
        from orchestrator import daemon  # the daemon's stack: not for --attach

        layout = StateLayout.from_env(root)
        loaded = inspect_bundle(args.bundle, state_root=layout.root)
        if loaded.bundle is None:
            for diag in loaded.errors:
                print(str(diag), file=sys.stderr)
            return _Ran(EXIT_USAGE)
        try:
            swarm = loaded.bundle.swarm(getattr(args, "swarm", None))
        except (KeyError, BundleError) as exc:
            print(f"goondan eval: {exc}", file=sys.stderr)
            return _Ran(EXIT_USAGE)
        results: list[Result] = []
        judge = _judge(spec, loaded.bundle.path, layout.root)
        opts = daemon.DaemonOptions(bundle=loaded.bundle, swarm=swarm, layout=layout, quiet=True,
                                    on_started=_runner(spec, args, results, judge,
                                                       prices_of(loaded.bundle)))  # fmt: skip
        code = daemon.run(opts)
        return _Ran(code, results, swarm.name, str(loaded.bundle.path), layout.root)

    def _run_attached(self, args: argparse.Namespace, spec: EvalFile) -> _Ran:
        """`--attach`: the cases go to the daemon already running the bundle's swarm (under
        --state-root), over its control socket; their instances stay there for `instance show`."""
        if getattr(args, "record", None) or getattr(args, "replay", None):
            print("goondan eval: --attach uses the daemon's own Models: no --record/--replay",
                  file=sys.stderr)  # fmt: skip
            return _Ran(EXIT_USAGE)
        layout = client.layout_of(args)
        loaded = inspect_bundle(args.bundle, state_root=layout.root)
        if loaded.bundle is None:
            for diag in loaded.errors:
                print(str(diag), file=sys.stderr)
            return _Ran(EXIT_USAGE)
        try:
            swarm = loaded.bundle.swarm(getattr(args, "swarm", None))
            info = client.find_daemons(argparse.Namespace(**{**vars(args), "swarm": swarm.name}))[0]
        except (KeyError, BundleError) as exc:
            print(f"goondan eval: {exc}", file=sys.stderr)
            return _Ran(EXIT_USAGE)
        except client.ClientError as exc:
            client.Printer("eval").error(exc.error)
            return _Ran(EXIT_RUNTIME)
        judge = _judge(spec, loaded.bundle.path, layout.root)
        results: list[Result] = []
        go = _runner(spec, args, results, judge, prices_of(loaded.bundle))
        code = asyncio.run(go(RemoteTarget(info)))
        return _Ran(code, results, swarm.name, str(loaded.bundle.path))

    def _report(
        self,
        args: argparse.Namespace,
        ran: _Ran,
        started: float,
        previous: dict[str, Any] | None,
    ) -> int:
        results = ran.results
        print(report.table(results, args.repeat))
        if previous is not None:
            print("\n".join(report.compare(previous, results)) or "no change against --compare")
        name = Path(args.file).stem
        if args.junit:
            report.write_junit(Path(args.junit), results, name)
        document = {
            **report.as_json(results), "file": str(Path(args.file).absolute()), "name": name,
            "bundle": ran.bundle, "swarm": ran.swarm, "startedAt": started,
            "finishedAt": time.time(), "repeat": args.repeat, "concurrency": args.concurrency,
            "attached": ran.state is None, "summary": report.summary(results),
        }  # fmt: skip
        if args.json:
            report.write_json(Path(args.json), document)
        _keep(args, document, ran.state)
        return EXIT_OK if all(r.passed for r in results) else EXIT_RUNTIME


def _keep(args: argparse.Namespace, document: dict[str, Any], state: Path | None) -> None:
    """Keep the run under the user's state root; a failure to keep it does not fail the eval
    (its report is on stdout and in --json/--junit), it is said."""
    layout = client.layout_of(args)
    run_id = runs.new_id(document["startedAt"])
    try:
        if args.keep_runs == 0:
            runs.prune(layout, 0)
            return
        where = runs.save(layout, run_id, document, state, args.keep_runs)
    except OSError as exc:
        print(f"goondan eval: the run was not kept under {runs.runs_dir(layout)}: {exc}",
              file=sys.stderr)  # fmt: skip
        return
    print(f"goondan eval: run {run_id} kept in {where} (Studio: Evals)", file=sys.stderr)


COMMAND = _Eval()
