"""The fork server's warm-up of a child's start steps: pure, and safe on any bundle."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_process import preload, resolve, warm
from bundles.loader import load_bundle

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "reload" / "two"


@pytest.fixture(autouse=True)
def _restore_held() -> Iterator[None]:
    saved = list(preload._held)
    yield
    preload._held[:] = saved


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_warming_runs_the_start_steps_and_leaves_nothing_behind(tmp_path: Path) -> None:
    root = tmp_path / "bundle"
    shutil.copytree(FIXTURE, root)
    state = tmp_path / "state"
    bundle = load_bundle(root, state_root=state)
    preload.remember(bundle, (), state)
    before = _tree(tmp_path)
    warm.child_start(bundle, (), state)
    assert _tree(tmp_path) == before  # no instance dir, log or pending call was written
    assert preload.take(root, (), state) is bundle  # the held bundle is still current


def test_an_agent_that_cannot_start_is_left_to_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "bundle"
    shutil.copytree(FIXTURE, root)
    yaml = root / "goondan.yaml"
    key = "  model: test\n  apiKey: {valueFrom: {env: WARM_TEST_KEY}}"
    yaml.write_text(yaml.read_text().replace("  model: test", key))
    monkeypatch.setenv("WARM_TEST_KEY", "sk-test")
    state = tmp_path / "state"
    bundle = load_bundle(root, state_root=state)
    monkeypatch.delenv("WARM_TEST_KEY")  # gone by the time a child would resolve it
    with pytest.raises(resolve.ConfigProblem):
        resolve.api_key(bundle, bundle.model("scripted"), state)
    warm.child_start(bundle, (), state)  # no exception: the child reports it as start_error
