"""`--swarm` / `--state-root` after a command's action (ARCHITECTURE.md §9: every command takes them
after its name). Found writing the chaos suite: `goondan calls list --swarm S` was a usage
error (exit 2), only `goondan calls --swarm S list` worked."""

from __future__ import annotations

import pytest

from orchestrator.cli import all_commands, build_parser


@pytest.mark.parametrize(
    "argv",
    [
        ["calls", "list", "--json", "--swarm", "s", "--state-root", "/r"],
        ["calls", "--swarm", "s", "--state-root", "/r", "list", "--json"],
        ["calls", "resolve", "ID", "--result", "1", "--swarm", "s", "--state-root", "/r"],
        ["instance", "list", "--swarm", "s", "--state-root", "/r"],
        ["instance", "--swarm", "s", "delete", "KEY", "--state-root", "/r"],
    ],
)
def test_common_options_before_or_after_the_action(argv: list[str]) -> None:
    args = build_parser(all_commands()).parse_args(argv)
    assert (args.swarm, args.state_root) == ("s", "/r")


def test_absent_after_the_action_keeps_none() -> None:
    args = build_parser(all_commands()).parse_args(["calls", "list"])
    assert (args.swarm, args.state_root) == (None, None)
