"""The fork server's preloaded bundle: stale after an edit, current again after refresh()."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agent_process import forkprep, preload
from bundles.diagnostics import BundleError
from bundles.loader import load_bundle
from tests.unit.agent_process.helpers import launch_for

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "reload" / "two"
pytestmark = pytest.mark.usefixtures("restore_preloaded")


def test_refresh_reloads_an_edited_bundle_and_drops_an_invalid_one(tmp_path: Path) -> None:
    root = tmp_path / "bundle"
    shutil.copytree(FIXTURE, root)
    state = tmp_path / "state"
    bundle = load_bundle(root, state_root=state)
    preload.remember(bundle, launch_for(bundle, state))
    held = preload.take(root, (), state)
    assert held is not None and held.model("scripted").spec.model == "test"
    yaml = root / "goondan.yaml"
    yaml.write_text(yaml.read_text().replace("model: test", "model: edited"))
    assert preload.take(root, (), state) is None  # stale: a child would load it itself
    renewed = preload.refresh()
    fresh = preload.take(root, (), state)
    assert fresh is not None and fresh.model("scripted").spec.model == "edited"
    assert renewed is not None and renewed.bundle is fresh  # what the hook then warms
    assert preload.refresh() is None  # still current: kept as is
    assert preload.take(root, (), state) is fresh
    yaml.write_text(yaml.read_text().replace("modelRef: Model/scripted", "modelRef: Model/no"))
    with pytest.raises(BundleError):
        preload.refresh()
    assert preload.take(root, (), state) is None  # dropped: children load and report it


def test_take_matches_the_inputs_however_they_are_spelled(tmp_path: Path) -> None:
    """The orchestrator passes the paths as loaded (compared as strings, no resolve); another
    spelling of the same files (`..`, a symlink) still matches, another input does not."""
    root = tmp_path / "bundle"
    shutil.copytree(FIXTURE, root)
    state = tmp_path / "state"
    bundle = load_bundle(root, state_root=state)
    preload.remember(bundle, launch_for(bundle, state))
    link = tmp_path / "link"
    link.symlink_to(root)
    assert preload.take(bundle.path, (), state) is bundle
    assert preload.take(root / ".." / "bundle", (), tmp_path / "." / "state") is bundle
    assert preload.take(link / "goondan.yaml", (), state) is bundle
    assert preload.take(root, (tmp_path / ".env",), state) is None
    assert preload.take(tmp_path, (), state) is None


def test_the_fork_server_hook_holds_and_prepares_the_reloaded_bundle(tmp_path: Path) -> None:
    """`forkprep.refresh` is what the daemon asks the fork server to run after a reload."""
    root = tmp_path / "bundle"
    shutil.copytree(FIXTURE, root)
    state = tmp_path / "state"
    bundle = load_bundle(root, state_root=state)
    preload.remember(bundle, launch_for(bundle, state))
    yaml = root / "goondan.yaml"
    yaml.write_text(yaml.read_text().replace("model: test", "model: edited"))
    forkprep.refresh()
    fresh = preload.take(root, (), state)
    assert fresh is not None and fresh.model("scripted").spec.model == "edited"
    assert not state.exists()  # preparing the new bundle wrote nothing
