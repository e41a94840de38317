"""`goondan validate [BUNDLE] [--json] [--strict]`: check a bundle; exit 0 valid, 2 invalid."""

from __future__ import annotations

import argparse
import sys

from orchestrator.exitcodes import EXIT_USAGE


class _Validate:
    name = "validate"
    help = "check a bundle and print every error at once (exit 0 valid, 2 invalid)"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("bundle", nargs="?", default="goondan.yaml", metavar="BUNDLE")
        parser.add_argument("--json", action="store_true", help="print the errors as JSON")
        parser.add_argument("--strict", action="store_true", help="treat warnings as errors")

    def run(self, args: argparse.Namespace) -> int:
        print("goondan validate: not implemented yet", file=sys.stderr)
        return EXIT_USAGE


COMMAND = _Validate()
