"""`goondan service print-unit [BUNDLE] [--user] [--name N] [--env-file F] [--writable DIR]`.

Prints a systemd unit that runs the bundle's swarm as a `Type=notify` service, with absolute
paths (this interpreter's `goondan`, the bundle, env files), the watchdog, a stop timeout longer
than the swarm's grace period, and sandboxing that leaves the daemon working. Nothing is
installed: redirect the output into /etc/systemd/system (or ~/.config/systemd/user with
`--user`). Exit 0 printed, 2 invalid bundle or bad name.
"""

from __future__ import annotations

import argparse
import os
import pwd
import re
import sys
from pathlib import Path

from bundles.diagnostics import BundleError
from bundles.loader import load_bundle
from orchestrator.exitcodes import EXIT_OK, EXIT_USAGE
from orchestrator.templates.unit import UnitSpec, render_unit

_UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.\\-]{1,200}$")
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9:_.\-]")


def goondan_argv() -> list[str]:
    """How this interpreter runs goondan: its `goondan` script, else `python -m orchestrator`."""
    python = Path(os.path.abspath(sys.executable))
    script = python.parent / "goondan"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [str(python), "-m", "orchestrator"]


def default_unit_name(swarm: str) -> str:
    return "goondan-" + _NOT_IN_NAME.sub("-", swarm)


def _operator() -> str | None:
    """The user a system unit runs as: whoever generates it, unless that is root."""
    uid = os.geteuid()
    if uid == 0:
        return None
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def unit_spec(args: argparse.Namespace) -> UnitSpec:
    """The unit for the parsed arguments; BundleError / KeyError / ValueError say what is wrong."""
    env_files = tuple(Path(f).absolute() for f in args.env_file)
    state_root = Path(args.state_root).expanduser().absolute() if args.state_root else None
    bundle = load_bundle(args.bundle, env_files=env_files, state_root=state_root)
    swarm = bundle.swarm(args.swarm)
    name = args.name or default_unit_name(swarm.name)
    if name.endswith(".service"):
        name = name[: -len(".service")]
    if not _UNIT_NAME.match(name):
        raise ValueError(f"--name {name!r} is not a unit name: use letters, digits, ':_.-'")
    return UnitSpec(
        name=name,
        swarm=swarm.name,
        bundle=bundle.path.absolute(),
        exec_argv=goondan_argv(),
        grace_period=swarm.spec.policy.shutdown.grace_period_seconds,
        user_unit=args.user,
        state_root=state_root,
        env_files=env_files,
        run_as=None if args.user else (args.run_as or _operator()),
        writable=tuple(Path(d).expanduser().absolute() for d in args.writable),
    )


def _print_unit(args: argparse.Namespace) -> int:
    try:
        spec = unit_spec(args)
    except BundleError as exc:
        for diag in exc.diagnostics:
            print(str(diag), file=sys.stderr)
        print(f"{len(exc.diagnostics)} error(s); no unit printed", file=sys.stderr)
        return EXIT_USAGE
    except (KeyError, ValueError) as exc:
        print(f"goondan service print-unit: {exc.args[0]}", file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.write(render_unit(spec))
    return EXIT_OK


class _Service:
    name = "service"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
        unit = actions.add_parser(
            "print-unit",
            help="print a systemd unit (Type=notify, watchdog, sandboxed) for BUNDLE",
            description=__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        unit.add_argument("bundle", nargs="?", default="goondan.yaml", metavar="BUNDLE")
        # The common options again, so they work after the action too; SUPPRESS keeps a value
        # given before the action (`goondan service --swarm S print-unit`).
        unit.add_argument("--state-root", metavar="DIR", default=argparse.SUPPRESS)
        unit.add_argument("--swarm", metavar="S", default=argparse.SUPPRESS)
        unit.add_argument("--user", action="store_true", help="a unit for `systemctl --user`")
        unit.add_argument(
            "--run-as", metavar="USER",
            help="User= of a system unit (default: you, or root when root generates it); a "
            "dedicated user (useradd --system goondan) keeps agents away from your files",
        )  # fmt: skip
        unit.add_argument("--name", metavar="N", help="unit name (default goondan-<swarm>)")
        unit.add_argument("--env-file", action="append", default=[], metavar="F")
        unit.add_argument(
            "--writable",
            action="append",
            default=[],
            metavar="DIR",
            help="another directory the agents may write to (ReadWritePaths; repeatable)",
        )

    def run(self, args: argparse.Namespace) -> int:
        if args.action == "print-unit":
            return _print_unit(args)
        print(f"goondan service: unknown action {args.action!r}", file=sys.stderr)
        return EXIT_USAGE


COMMAND = _Service()
