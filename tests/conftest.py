"""Shared test settings: every test runs with its own state root so nothing touches ~/.goondan."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_state_root(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    # Short path: ipc socket paths must stay under 107 bytes.
    root = tmp_path_factory.mktemp("st")
    monkeypatch.setenv("GOONDAN_STATE_ROOT", str(root))
    return root
