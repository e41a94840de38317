"""The fork server's bundle is reused by children only while its files are unchanged."""

from __future__ import annotations

import shutil
from pathlib import Path

from agent_process import preload
from bundles.loader import load_bundle
from tests.integration.harness import SWARM
from tests.unit.agent_process.helpers import launch_for


def test_a_remembered_bundle_is_reused_until_a_file_changes(tmp_path: Path) -> None:
    bundle_dir = tmp_path / "b"
    shutil.copytree(SWARM, bundle_dir)
    state = tmp_path / "state"
    bundle = load_bundle(bundle_dir, state_root=state)
    preload.remember(bundle, launch_for(bundle, state))
    assert preload.take(bundle_dir / "goondan.yaml", (), state) is bundle
    assert preload.take(bundle_dir, (), state) is bundle
    assert preload.take(bundle_dir, (tmp_path / ".env",), state) is None  # other inputs
    assert preload.take(bundle_dir, (), tmp_path / "other") is None
    main = bundle_dir / "goondan.yaml"
    main.write_text(main.read_text() + "\n# edited\n")
    assert preload.take(bundle_dir, (), state) is None
    (bundle_dir / ".env").write_text("X=1\n")  # a new env file next to the bundle counts too
    preload.remember(bundle, launch_for(bundle, state))
    (bundle_dir / ".env").write_text("X=2\n")
    assert preload.take(bundle_dir, (), state) is None
