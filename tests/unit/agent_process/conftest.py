"""Shared by the agent runtime's unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent_process import prebuilt_tools, preload
from agent_process.forkprep import heap, immortal


@pytest.fixture
def restore_preloaded() -> Iterator[None]:
    """What a test makes the fork-server preparation hold (the bundle, the built-in tools'
    entries, the heap filling) is dropped after it. The test process is never made immortal
    (`forkprep.immortal`: none of its objects would be freed again)."""
    immortal._done[:] = [True]
    saved, built = list(preload._held), dict(prebuilt_tools._held)
    yield
    preload._held[:] = saved
    prebuilt_tools._held.clear()
    prebuilt_tools._held.update(built)
    heap._held.clear()
