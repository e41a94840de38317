"""Helpers for the config-plane tests: fixture bundles and small bundle writers."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "bundles"

VALID_TAIL = """\
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: fake
spec:
  provider: scripted
  model: test
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: main
spec:
  modelConfig:
    modelRef: Model/fake
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: s
spec:
  entryAgent: Agent/main
  agents: [Agent/main]
"""
"""A valid model + agent + swarm: 23 lines, so a document appended after it starts at 25."""


def write_bundle(directory: Path, text: str, name: str = "goondan.yaml") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def fixture_copy(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Copy a fixture bundle into tmp (for tests that add symlinks or files)."""

    def copy(name: str) -> Path:
        target = tmp_path / name
        shutil.copytree(FIXTURES / name, target)
        return target

    return copy
