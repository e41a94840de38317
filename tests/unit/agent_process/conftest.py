"""Shared by the agent runtime's unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent_process import preload


@pytest.fixture
def restore_preloaded() -> Iterator[None]:
    """Whatever a test makes the fork-server preload hold is dropped after it."""
    saved = list(preload._held)
    yield
    preload._held[:] = saved
