"""`goondan validate [BUNDLE] [--json] [--strict] [--env-file F]`: check a bundle, start nothing.

Human output: one summary line when valid (`goondan.yaml: valid — 1 Swarm, 1 Agent, ...`), or
every error as `path: CODE message (suggestion)` on stderr. `--json` prints
`{"valid", "errors", "warnings", "resources"}` on stdout. Exit 0 valid, 2 invalid
(`--strict` turns warnings, such as an unset env variable, into errors).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from bundles import refs
from bundles.diagnostics import BundleError
from bundles.kinds import Kind
from bundles.loader import BundleReport, inspect_bundle
from bundles.model import Bundle, Resource
from bundles.packages.lock import FROZEN_HELP, frozen
from orchestrator.deepcheck import deep_check
from orchestrator.exitcodes import EXIT_OK, EXIT_USAGE

_SUMMARY_ORDER = (
    Kind.SWARM,
    Kind.AGENT,
    Kind.MODEL,
    Kind.TOOL,
    Kind.EXTENSION,
    Kind.CONNECTOR,
    Kind.CONNECTION,
)


def used_resources(bundle: Bundle) -> list[Resource[Any]]:
    """The user's resources plus the package resources they reference (models, tools, ...)."""
    out = {r.key: r for r in bundle.resources if r.package is None and r.kind is not Kind.PACKAGE}
    try:
        for agent in bundle.of_kind(Kind.AGENT, user_only=True):
            picked: list[Resource[Any]] = [refs.resolve_model(bundle, agent)]
            picked += refs.resolve_tools(bundle, agent)
            picked += refs.resolve_extensions(bundle, agent)
            out.update({r.key: r for r in picked if r.package is not None})
        for conn in bundle.connections():
            connector = refs.connection_connector(bundle, conn)
            out.setdefault(connector.key, connector)
    except BundleError:
        pass  # cannot happen on a validated bundle; the summary just counts less
    return list(out.values())


def _plural(n: int, kind: Kind) -> str:
    return f"{n} {kind}" if n == 1 else f"{n} {kind}s"


def summary(bundle: Bundle) -> str:
    used = used_resources(bundle)
    parts = []
    for kind in _SUMMARY_ORDER:
        of_kind = [r for r in used if r.kind is kind]
        if not of_kind:
            continue
        packaged: dict[str, int] = {}
        for r in of_kind:
            if r.package is not None:
                packaged[r.package] = packaged.get(r.package, 0) + 1
        extra = ", ".join(f"{n} from {p}" for p, n in sorted(packaged.items()))
        parts.append(_plural(len(of_kind), kind) + (f" ({extra})" if extra else ""))
    return f"{bundle.path.name}: valid — " + (", ".join(parts) or "no resources")


def _resources_json(bundle: Bundle | None) -> dict[str, list[str]]:
    if bundle is None:
        return {}
    out: dict[str, list[str]] = {}
    for r in used_resources(bundle):
        out.setdefault(str(r.kind), []).append(f"{r.package}:{r.name}" if r.package else r.name)
    return out


def report_json(report: BundleReport) -> str:
    return json.dumps(
        {
            "valid": report.valid,
            "errors": [d.to_dict() for d in report.errors],
            "warnings": [d.to_dict() for d in report.warnings],
            "resources": _resources_json(report.bundle),
        },
        indent=2,
        ensure_ascii=False,
    )


class _Validate:
    name = "validate"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("bundle", nargs="?", default="goondan.yaml", metavar="BUNDLE")
        parser.add_argument("--json", action="store_true", help="print the result as JSON")
        parser.add_argument("--strict", action="store_true", help="treat warnings as errors")
        parser.add_argument(
            "--deep", action="store_true",
            help="also import every entry file (in a separate process) and check its handlers, "
            "register() and run() against the bundle",
        )  # fmt: skip
        parser.add_argument(
            "--env-file",
            action="append",
            default=[],
            metavar="F",
            help="read KEY=VALUE lines from F (repeatable; never overrides the environment)",
        )
        parser.add_argument("--frozen", action="store_true", help=FROZEN_HELP)

    def run(self, args: argparse.Namespace) -> int:
        state_root = Path(args.state_root) if getattr(args, "state_root", None) else None
        report = inspect_bundle(
            args.bundle,
            env_files=[Path(f) for f in args.env_file],
            state_root=state_root,
            strict=args.strict,
        )
        if args.frozen:
            report = frozen(report)
        if args.deep and report.valid:
            swarm = getattr(args, "swarm", None)
            env_files = [Path(f) for f in args.env_file]
            found = deep_check(
                Path(args.bundle), env_files=env_files, swarm=swarm, state_root=state_root
            )
            report = replace(
                report, errors=[*report.errors, *found], bundle=None if found else report.bundle
            )
        if args.json:
            print(report_json(report))
        else:
            for warning in report.warnings:
                print(f"warning: {warning}", file=sys.stderr)
            for error in report.errors:
                print(str(error), file=sys.stderr)
            if report.bundle is not None:
                print(summary(report.bundle))
            else:
                print(f"{len(report.errors)} error(s)", file=sys.stderr)
        return EXIT_OK if report.valid else EXIT_USAGE


COMMAND = _Validate()
