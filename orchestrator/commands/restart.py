"""`goondan restart [--agent A] [--fresh]`: gracefully restart running agent processes.

Only the chosen agent's processes (all agents without `--agent`) get `shutdown{restart}`
and a new generation; conversation history is kept unless `--fresh` deletes it. With
`--reload`, the daemon re-reads the bundle and restarts only what the edit affects.
"""

from __future__ import annotations

import argparse

from orchestrator.control.client import Printer, ask, new_request_id
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME
from protocol.control import Reload, Restart

FRESH = ("their history was cleared (conversation, extension state, pending calls); "
         "workspaces stay (goondan instance delete removes them)")  # fmt: skip


class _Restart:
    name = "restart"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--agent", metavar="A", help="only this agent's processes")
        parser.add_argument("--fresh", action="store_true", help="also delete their history")
        parser.add_argument("--timeout", type=float, default=120.0, metavar="S")
        parser.add_argument(
            "--reload", action="store_true",
            help="re-read the bundle and restart only what changed (like SIGHUP)",
        )  # fmt: skip

    def run(self, args: argparse.Namespace) -> int:
        printer = Printer(self.name)
        req: Restart | Reload = Restart(
            request_id=new_request_id(), agent=args.agent, fresh=args.fresh
        )
        if args.reload:
            req = Reload(request_id=new_request_id())
        answered = ask(args, req, printer, args.timeout)
        if answered is None:
            return EXIT_RUNTIME
        _, reply = answered
        result = reply.result
        grace = float(result.get("graceSeconds", 0))
        if args.reload:
            lines = describe(result.get("replaced", []), grace)
            lines += [f"stopped {p} (no longer in the bundle)" for p in result.get("stopped", [])]
        else:
            lines = describe(result.get("restarted", []), grace)
            if args.fresh:
                lines.append(FRESH)
        print("\n".join(lines))
        return EXIT_OK


def describe(rows: list[dict[str, object]], grace: float) -> list[str]:
    """One line per restarted process: old -> new, and how the old one ended."""
    lines = [f"restarted {len(rows)} process(es)"]
    for row in rows:
        how = "drained"
        if row.get("killed"):
            how = f"killed after the {grace:g} s grace period: its turn did not end"
        lines.append(f"  {row.get('process')} -> {row.get('started')} ({how})")
    return lines


COMMAND = _Restart()
