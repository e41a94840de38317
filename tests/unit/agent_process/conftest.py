"""Shared by the agent runtime's unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent_process import prebuilt_tools, preload
from agent_process.forkprep import heap


@pytest.fixture
def restore_preloaded() -> Iterator[None]:
    """What a test makes the fork-server preparation hold (the bundle, the built-in tools'
    entries, the heap filling) is dropped after it."""
    saved, built = list(preload._held), dict(prebuilt_tools._held)
    yield
    preload._held[:] = saved
    prebuilt_tools._held.clear()
    prebuilt_tools._held.update(built)
    heap._held.clear()
