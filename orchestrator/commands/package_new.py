"""`goondan package new NAME [DIR]`: write a ready distribution serving the goondan package NAME.

DIR (default: the name without its scope) must not exist or be empty: nothing is overwritten.
The files come from `orchestrator.templates.package_texts`; the package's goondan.yaml is
checked as `package check` would before saying it is ready.
Exit 0 written, 1 the files could not be written, 2 a bad NAME or a non-empty DIR.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bundles.naming import package_name_problem
from orchestrator.commands.init import write_files
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME, EXIT_USAGE
from orchestrator.templates.package_texts import names, render
from protocol.errors import ErrorCode


def configure(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    new = actions.add_parser(
        "new",
        help="write a new goondan package: a Python distribution with a Tool and a Connector",
        description="Write a ready Python distribution serving the goondan package NAME "
        "(`@scope/name`): pyproject.toml with the goondan.packages entry point, the module "
        "with its goondan.yaml (Package, a Tool, a Connector), their code, a test, a README.",
    )
    new.add_argument("name", metavar="NAME", help="the package name, e.g. @acme/triage")
    new.add_argument(
        "directory", nargs="?", metavar="DIR", help="where to write it (default: the name)"
    )


def run(args: argparse.Namespace) -> int:
    problem = package_name_problem(args.name)
    if problem is not None:
        print(f"goondan package new: {ErrorCode.E_PACKAGE_INVALID}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    directory = Path(args.directory or args.name.rsplit("/", 1)[-1])
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        print(
            f"goondan package new: {directory} exists and is not an empty directory; "
            "nothing was written (choose another DIR)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        written = write_files(directory, render(args.name))
    except OSError as exc:
        print(f"goondan package new: cannot write into {directory}: {exc}", file=sys.stderr)
        return EXIT_RUNTIME
    for path in written:
        print(f"wrote {path}")
    dist, module, _ = names(args.name)
    print(f"package {args.name}: distribution {dist}, module {module}")
    print(
        f"next: cd {directory} && goondan package check && "
        "pip wheel --no-build-isolation --no-deps -w dist ."
    )
    return EXIT_OK
