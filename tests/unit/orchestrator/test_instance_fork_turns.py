"""Which turn `goondan instance fork --at` means (orchestrator/commands/instance_fork.py)."""

from __future__ import annotations

import pytest

from orchestrator.commands.instance_fork import ForkFailed, pick_turn
from protocol.errors import ErrorCode

IDS = ["t_aaaa1111", "t_bbbb2222", "t_aaaa3333"]


def test_a_number_an_id_or_a_unique_prefix() -> None:
    assert pick_turn(IDS, "2", "k") == (2, "t_bbbb2222")
    assert pick_turn(IDS, "t_aaaa3333", "k") == (3, "t_aaaa3333")
    assert pick_turn(IDS, "t_bbbb", "k") == (2, "t_bbbb2222")


@pytest.mark.parametrize("at", ["0", "4", "t_aaaa", "t_", "", "x" * 10_000, "-1", "1.5"])
def test_anything_else_is_a_coded_error(at: str) -> None:
    with pytest.raises(ForkFailed) as info:
        pick_turn(IDS, at, "k")
    assert info.value.error.code == ErrorCode.E_TURN_NOT_FOUND
    assert len(info.value.error.message) < 200
