"""`goondan package lock [--bundle B]`: write goondan.lock beside the bundle's goondan.yaml.

The lock names, for each package the bundle loads (`@goondan/base`, its dependencies and
theirs), the distribution, version and a hash of its files (`bundles.packages.lock`);
`goondan run --frozen` and `goondan validate --frozen` then refuse to start when what is
installed differs. Nothing is downloaded. Exit 0 written, 2 when the bundle is not valid.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from bundles.loader import inspect_bundle
from bundles.packages.installed import installed
from bundles.packages.lock import LockError, lock_path, snapshot, write
from orchestrator.exitcodes import EXIT_OK, EXIT_USAGE


def configure(actions: Any) -> None:
    parser = actions.add_parser(
        "lock",
        help="write goondan.lock: the installed packages the bundle uses (for --frozen)",
        description="Write goondan.lock beside the bundle's goondan.yaml: for each package "
        "the bundle uses, its distribution, version and a hash of its files. `goondan run "
        "--frozen` and `goondan validate --frozen` refuse to start when they differ.",
    )
    parser.add_argument(
        "--bundle", metavar="B", default="goondan.yaml",
        help="the bundle to lock (default: ./goondan.yaml)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    report = inspect_bundle(Path(args.bundle), require_swarm=False)
    if report.bundle is None or report.bundle.packages is None:
        for error in report.errors:
            print(str(error), file=sys.stderr)
        print(f"{len(report.errors)} error(s); no lock written", file=sys.stderr)
        return EXIT_USAGE
    bundle = report.bundle
    path = lock_path(bundle.root)
    try:
        entries = snapshot(bundle.packages or {}, installed())
        write(path, entries)
    except LockError as exc:
        print(f"{path}: {exc.code} {exc.message} ({exc.suggestion})", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        print(f"goondan package lock: cannot write {path}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for name, entry in entries.items():
        print(f"{name}  {entry.distribution} {entry.version}  {entry.hash[:19]}")
    print(f"wrote {path}")
    return EXIT_OK
