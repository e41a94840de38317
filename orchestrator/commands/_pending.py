"""Commands that are listed in --help but not built yet: they say so and exit 2."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from orchestrator.exitcodes import EXIT_USAGE


@dataclass(frozen=True, slots=True)
class PendingCommand:
    name: str
    help: str

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def run(self, args: argparse.Namespace) -> int:
        print(f"goondan {self.name}: not implemented yet in this version", file=sys.stderr)
        return EXIT_USAGE
