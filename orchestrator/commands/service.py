"""`goondan service print-unit [BUNDLE] [--user] [--name N] [--env-file F] [--writable DIR]`.

Prints a systemd unit that runs the bundle's swarm as a `Type=notify` service, with absolute
paths (this interpreter's `goondan`, the bundle, env files), the watchdog, a stop timeout longer
than the swarm's grace period, and sandboxing that leaves the daemon working. Nothing is
installed: redirect the output into /etc/systemd/system (or ~/.config/systemd/user with
`--user`). As root it needs `--run-as USER` (E_SERVICE_RUN_AS otherwise: the unit would run
every agent as root); it warns when what the unit needs is under /tmp (PrivateTmp=yes hides
it). Exit 0 printed, 2 invalid bundle, bad name or no `--run-as` as root.
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
from protocol.errors import ErrorCode

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


class RunAsRoot(Exception):
    """A system unit generated as root without `--run-as` (E_SERVICE_RUN_AS)."""


DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
"""The operations page of a checkout; an installed wheel has no docs/ and the unit names none."""
HIDDEN_BY_PRIVATE_TMP = (Path("/tmp"), Path("/var/tmp"))


def _run_as(args: argparse.Namespace) -> str | None:
    """`User=` of a system unit: `--run-as`, else whoever generates it. Root must say so: a
    unit without `User=` runs every agent and tool as root."""
    if args.user:
        return None
    if args.run_as:
        return str(args.run_as)
    uid = os.geteuid()
    if uid == 0:
        raise RunAsRoot(
            f"{ErrorCode.E_SERVICE_RUN_AS}: as root, name the user the unit runs as: "
            "--run-as USER (a dedicated one: useradd --system goondan), or --run-as root to "
            "run every agent and tool as root"
        )
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _hidden_paths(spec: UnitSpec) -> list[Path]:
    """What a system unit needs from /tmp, which its PrivateTmp=yes replaces with an empty one."""
    if spec.user_unit:
        return []
    needed = [spec.bundle, Path(spec.exec_argv[0]), *spec.env_files]
    if spec.state_root is not None:
        needed.append(spec.state_root)
    return [p for p in needed if any(p.is_relative_to(tmp) for tmp in HIDDEN_BY_PRIVATE_TMP)]


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
        run_as=_run_as(args),
        writable=tuple(Path(d).expanduser().absolute() for d in args.writable),
        docs=DOCS if DOCS.is_file() else None,
    )


def _print_unit(args: argparse.Namespace) -> int:
    try:
        spec = unit_spec(args)
    except BundleError as exc:
        for diag in exc.diagnostics:
            print(str(diag), file=sys.stderr)
        print(f"{len(exc.diagnostics)} error(s); no unit printed", file=sys.stderr)
        return EXIT_USAGE
    except (KeyError, ValueError, RunAsRoot) as exc:
        print(f"goondan service print-unit: {exc.args[0]}", file=sys.stderr)
        return EXIT_USAGE
    for path in _hidden_paths(spec):
        print(f"goondan service print-unit: warning: {path} is under /tmp, which the unit's "
              "PrivateTmp=yes hides from the service: move it (e.g. under /srv or /opt)",
              file=sys.stderr)  # fmt: skip
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
            help="User= of a system unit (default: you; as root it must be given, `--run-as "
            "root` included); a dedicated user (useradd --system goondan) keeps agents away "
            "from your files",
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
