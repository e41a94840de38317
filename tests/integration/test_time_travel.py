"""Time travel on a conversation: `goondan instance fork` (and `replay`) through the real CLI,
against a real daemon and the scripted model (orchestrator/commands/instance_fork.py)."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from tests.integration.conftest import StartDaemon
from tests.integration.harness import run_cli

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: scripted}
spec:
  provider: scripted
  model: travel
  options:
    script:
      - reply: "Hello! You said: {input}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: greeter}
spec:
  modelConfig: {modelRef: Model/scripted}
  prompt: {system: "Greet."}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: travel}
spec:
  entryAgent: Agent/greeter
  agents: [{ref: Agent/greeter}]
"""
INPUTS = ["one", "two", "three", "four"]


def _bundle(tmp_path: Path, text: str = BUNDLE, name: str = "bundle") -> Path:
    bundle = tmp_path / name
    bundle.mkdir()
    (bundle / "goondan.yaml").write_text(text)
    return bundle


async def _show(key: str) -> list[dict[str, object]]:
    code, out, err = await run_cli("instance", "show", key, "--json", "--swarm", "travel")
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def _said(messages: list[dict[str, object]]) -> list[object]:
    return [(m["role"], m["content"]) for m in messages]


async def test_fork_at_turn_2_of_4_with_and_without_a_daemon(
    tmp_path: Path, start_daemon: StartDaemon
) -> None:
    state = Path(os.environ["GOONDAN_STATE_ROOT"])
    async with asyncio.timeout(90):
        daemon = await start_daemon(_bundle(tmp_path), swarm="travel")
        for text in INPUTS:
            reply = await daemon.send(text, key="orig")
            assert reply.ok, reply.error
        original = await _show("orig")
        code, out, err = await run_cli("instance", "fork", "orig", "--at", "2", "--as", "forked")
        assert code == 0, err
        assert "at turn 2" in out
        forked = await _show("forked")
        assert _said(forked) == [
            ("user", "one"), ("assistant", "Hello! You said: one"),
            ("user", "two"), ("assistant", "Hello! You said: two"),
        ]  # fmt: skip
        assert await _show("orig") == original  # untouched
        # the daemon takes the fork up where it ends
        reply = await daemon.send("five", key="forked")
        assert reply.ok, reply.error
        assert _said(await _show("forked"))[4:] == [
            ("user", "five"), ("assistant", "Hello! You said: five"),
        ]  # fmt: skip
        turn_3 = original[4]["turnId"]
        assert isinstance(turn_3, str)
        for at, new_key, code_ in (
            ("5", "x1", "E_TURN_NOT_FOUND"),
            ("0", "x2", "E_TURN_NOT_FOUND"),
            ("t_nope", "x3", "E_TURN_NOT_FOUND"),
            ("1", "forked", "E_INSTANCE_EXISTS"),
            ("1", "orig", "E_INSTANCE_EXISTS"),
            ("1", "k" * 300, "E_AGENT_INVALID_INSTANCE_KEY"),
            ("1", "bad\x01key", "E_AGENT_INVALID_INSTANCE_KEY"),
        ):
            code, _, err = await run_cli("instance", "fork", "orig", "--at", at, "--as", new_key)
            assert code == 2, (at, new_key, err)
            assert code_ in err, (at, new_key, err)
        code, _, err = await run_cli("instance", "fork", "nosuch", "--at", "1", "--as", "y")
        assert (code, "E_INSTANCE_NOT_FOUND" in err) == (1, True), err
        await daemon.close()
        # without a daemon: the files alone; a turn id as `show` prints it; a path-like key
        # stays one escaped directory inside the swarm's instances
        hostile = "../../escaped"
        code, _, err = await run_cli(
            "instance", "fork", "orig", "--at", turn_3, "--as", hostile, "--swarm", "travel"
        )
        assert code == 0, err
    assert len(await _show(hostile)) == 6
    assert not (state.parent / "escaped").exists()
    assert sorted(p.name for p in (state / "instances" / "travel").iterdir()) == sorted(
        ["orig", "forked", "..%2F..%2Fescaped"]
    )


async def test_replay_against_a_changed_bundle_shows_the_differing_replies(
    tmp_path: Path, start_daemon: StartDaemon
) -> None:
    changed = BUNDLE.replace(
        '      - reply: "Hello! You said: {input}"',
        '      - {match: "^two$", reply: "Changed: two"}\n'
        '      - reply: "Hello! You said: {input}"',
    ).replace('prompt: {system: "Greet."}', 'prompt: {system: "Greet differently."}')
    b2 = _bundle(tmp_path, changed, "b2")
    async with asyncio.timeout(90):
        daemon = await start_daemon(_bundle(tmp_path), swarm="travel")
        for text in INPUTS:
            assert (await daemon.send(text, key="orig")).ok
        await daemon.close()
        code, out, err = await run_cli(
            "instance", "replay", "orig", "--bundle", str(b2), "--as", "again", "--swarm", "travel"
        )
        assert code == 0, err
        assert "4 turn(s), 1 differ" in out, out
        assert "turn 2 (differs)" in out and "turn 1 (differs)" not in out
        assert "-Hello! You said: two" in out and "+Changed: two" in out
        replayed = await _show("again")  # kept in the state root under B2's swarm
        assert [m["content"] for m in replayed if m["role"] == "assistant"] == [
            "Hello! You said: one", "Changed: two",
            "Hello! You said: three", "Hello! You said: four",
        ]  # fmt: skip
        code, _, err = await run_cli(
            "instance", "replay", "orig", "--bundle", str(b2), "--as", "again", "--swarm", "travel"
        )
        assert code == 2 and "E_INSTANCE_EXISTS" in err, err
        code, _, err = await run_cli(
            "instance", "replay", "nosuch", "--bundle", str(b2), "--swarm", "travel"
        )
        assert code == 1 and "E_INSTANCE_NOT_FOUND" in err, err
