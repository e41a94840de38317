"""The fork server's bundle is reused by children only while its files are unchanged."""

from __future__ import annotations

import shutil
from pathlib import Path

from agent_process import preload
from bundles.loader import load_bundle
from tests.integration.harness import SWARM


def test_a_remembered_bundle_is_reused_until_a_file_changes(tmp_path: Path) -> None:
    bundle_dir = tmp_path / "b"
    shutil.copytree(SWARM, bundle_dir)
    state = tmp_path / "state"
    bundle = load_bundle(bundle_dir, state_root=state)
    preload.remember(bundle, (), state)
    assert preload.take(bundle_dir / "goondan.yaml", (), state) is bundle
    assert preload.take(bundle_dir, (), state) is bundle
    assert preload.take(bundle_dir, (tmp_path / ".env",), state) is None  # other inputs
    assert preload.take(bundle_dir, (), tmp_path / "other") is None
    main = bundle_dir / "goondan.yaml"
    main.write_text(main.read_text() + "\n# edited\n")
    assert preload.take(bundle_dir, (), state) is None
    (bundle_dir / ".env").write_text("X=1\n")  # a new env file next to the bundle counts too
    preload.remember(bundle, (), state)
    (bundle_dir / ".env").write_text("X=2\n")
    assert preload.take(bundle_dir, (), state) is None


def test_the_fast_option_parser_agrees_with_argparse() -> None:
    from agent_process import child_options

    argv = [
        "--id", "agent:coder:telegram:42:7", "--endpoint", "ipc:///r/agents.sock",
        "--swarm", "s", "--bundle", "/b/goondan.yaml", "--state-root", "/st",
        "--env-file", "/b/.env", "--env-file", "/b/.env.local", "--ppid", "12",
        "--heartbeat-interval", "0.5", "--log-format", "console",
    ]  # fmt: skip
    fast = child_options._fast_parse(argv)
    slow = child_options.parser().parse_args(argv)
    assert fast == slow
    opts = child_options.parse_options(argv)
    assert (opts.process_id.instance_key, opts.process_id.generation) == ("telegram:42", 7)
    # anything unusual goes to argparse, which names the problem
    assert child_options._fast_parse([*argv, "--unknown", "x"]) is None
    assert child_options._fast_parse([*argv[:-2], "--log-format", "xml"]) is None
    assert child_options._fast_parse(argv[2:]) is None  # --id missing
