"""Edit & restart through a real daemon: SIGHUP, the Reload request and `run --watch` restart
only the processes an edit affects, keep their history, and an invalid edit touches nothing."""

from __future__ import annotations

import asyncio
import re
import shutil
import signal
from pathlib import Path

import pytest

from protocol.control import Reload
from protocol.endpoints import StateLayout
from protocol.errors import ErrorCode
from tests.integration.conftest import StartDaemon
from tests.integration.harness import Daemon, free_port, run_cli

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "reload" / "two"
SWARM = "edits"


MODES = [pytest.param({}, id="forkserver"), pytest.param({"GOONDAN_SPAWN_MODE": "cold"}, id="cold")]


async def two_running(
    start_daemon: StartDaemon,
    tmp_path: Path,
    args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> tuple[Daemon, Path, dict[str, int | None]]:
    """The two-agent bundle copied into tmp_path, both agents answered once."""
    root = tmp_path / "bundle"
    shutil.copytree(FIXTURE, root)
    daemon = await start_daemon(root, swarm=SWARM, args=args, env=env)
    for agent in ("alpha", "beta"):
        reply = await daemon.send(f"hello {agent}", agent)
        assert reply.ok, reply.error
    return daemon, root, await pids(daemon)


async def pids(daemon: Daemon) -> dict[str, int | None]:
    return {p.name: p.pid for p in (await daemon.status()).processes}


def append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(text)


def history(agent: str) -> str:
    """Everything the instance has persisted (base.jsonl plus its event log)."""
    paths = StateLayout.from_env().instance_paths(SWARM, SWARM, agent)
    files = sorted(paths.messages_dir.glob("*.jsonl"))
    return "".join(f.read_text(encoding="utf-8") for f in files)


async def assert_only_alpha_restarted(daemon: Daemon, before: dict[str, int | None]) -> None:
    reply = await daemon.send("after the edit", "alpha")
    assert reply.ok, reply.error
    assert reply.result["input"] == "after the edit"
    table = {p.name: p for p in (await daemon.status()).processes}
    assert table["beta"].pid == before["beta"] and table["beta"].generation == 1
    assert table["alpha"].pid not in (None, before["alpha"])
    assert table["alpha"].generation == 2
    assert table["alpha"].last_exit is not None and table["alpha"].last_exit.reason == "stopped"
    text = history("alpha")
    assert "hello alpha" in text and "after the edit" in text
    assert text.index("hello alpha") < text.index("after the edit")


@pytest.mark.parametrize("env", MODES)
async def test_sighup_restarts_only_the_edited_agent_and_keeps_its_history(
    start_daemon: StartDaemon, tmp_path: Path, env: dict[str, str]
) -> None:
    async with asyncio.timeout(60):
        daemon, root, before = await two_running(start_daemon, tmp_path, env=env)
        mark = daemon.mark()
        append(root / "prompts" / "alpha.md", "Answer in one word.\n")
        daemon.signal(signal.SIGHUP)
        done = await daemon.wait_for("reloaded", since=mark)
        assert done["trigger"] == "SIGHUP"
        assert done["agents"] == ["alpha"] and done["changed"] == ["Agent/alpha"]
        assert [p.split(":")[1] for p in done["restarted"]] == ["alpha"]
        assert not daemon.find("transition", mark, process="agent:beta:edits:1", target="draining")
        await assert_only_alpha_restarted(daemon, before)
        daemon.signal(signal.SIGTERM)
        assert await daemon.wait() == 0
        assert "after the edit" in history("alpha") and "hello beta" in history("beta")


async def test_watch_restarts_only_the_edited_agent(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    async with asyncio.timeout(60):
        daemon, root, before = await two_running(start_daemon, tmp_path, ("--watch",))
        await daemon.wait_for("watching")
        mark = daemon.mark()
        append(root / "prompts" / "alpha.md", "Answer in one word.\n")
        done = await daemon.wait_for("reloaded", since=mark)
        assert done["trigger"] == "watch" and done["agents"] == ["alpha"]
        await assert_only_alpha_restarted(daemon, before)
        running = await pids(daemon)
        yaml = root / "goondan.yaml"
        good = yaml.read_text(encoding="utf-8")
        mark = daemon.mark()
        yaml.write_text(good.replace("entryAgent: Agent/alpha", "entryAgent: Agent/nobody"))
        rejected = await daemon.wait_for("reload_rejected", since=mark)
        assert rejected["trigger"] == "watch" and "nobody" in str(rejected["diagnostics"])
        assert await pids(daemon) == running
        mark = daemon.mark()
        yaml.write_text(good)  # fixed back: the running bundle again, nothing to restart
        done = await daemon.wait_for("reloaded", since=mark)
        assert done["trigger"] == "watch" and done["restarted"] == [] and done["changed"] == []
        assert await pids(daemon) == running


async def test_an_invalid_edit_is_reported_and_touches_nothing(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    async with asyncio.timeout(60):
        daemon, root, before = await two_running(start_daemon, tmp_path)
        yaml = root / "goondan.yaml"
        yaml.write_text(
            yaml.read_text(encoding="utf-8").replace(
                "agents: [Agent/alpha, Agent/beta]", "agents: [Agent/alpha, Agent/gamma]"
            ),
            encoding="utf-8",
        )
        append(root / "prompts" / "alpha.md", "A valid change in an invalid bundle.\n")
        mark = daemon.mark()
        daemon.signal(signal.SIGHUP)
        rejected = await daemon.wait_for("reload_rejected", since=mark)
        assert rejected["trigger"] == "SIGHUP"
        assert any("gamma" in d for d in rejected["diagnostics"]), rejected
        reply = await daemon.request(Reload(request_id="r1"))
        assert not reply.ok and reply.error is not None
        assert reply.error.code == ErrorCode.E_CONFIG_REF_NOT_FOUND
        assert "gamma" in reply.error.message and "nothing was restarted" in reply.error.message
        code, _, err = await run_cli("restart", "--reload")
        assert code == 1 and "gamma" in err, err
        assert not daemon.find("reloaded", mark)
        assert not daemon.find("transition", mark, target="draining")
        assert await pids(daemon) == before
        assert (await daemon.send("still here", "alpha")).ok
        assert await pids(daemon) == before


async def test_the_reload_request_answers_what_it_restarted(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    async with asyncio.timeout(60):
        daemon, root, before = await two_running(start_daemon, tmp_path)
        reply = await daemon.request(Reload(request_id="r0"))
        assert reply.ok and reply.result["restarted"] == [], reply.result
        append(root / "prompts" / "beta.md", "Be kind.\n")
        reply = await daemon.request(Reload(request_id="r1"))
        assert reply.ok, reply.error
        assert reply.result["agents"] == ["beta"] and reply.result["trigger"] == "control"
        after = await pids(daemon)
        assert after["alpha"] == before["alpha"]
        code, out, err = await run_cli("restart", "--reload")
        assert code == 0 and out.startswith("restarted 0 process(es)"), (out, err)
        append(root / "prompts" / "beta.md", "Be brief.\n")
        code, out, err = await run_cli("restart", "--reload")
        assert code == 0 and out.startswith("restarted 1 process(es)"), (out, err)
        # old -> new, as `goondan restart` says it
        assert re.search(r"agent:beta:\S+ -> agent:beta:\S+ \(drained\)", out), out


@pytest.mark.parametrize("env", MODES)
async def test_a_yaml_edit_reaches_the_restarted_agent_only(
    start_daemon: StartDaemon, tmp_path: Path, env: dict[str, str]
) -> None:
    """New children run the NEW bundle (the fork server's preloaded copy is stale now)."""
    async with asyncio.timeout(60):
        daemon, root, before = await two_running(start_daemon, tmp_path, env=env)
        yaml = root / "goondan.yaml"
        text = yaml.read_text(encoding="utf-8")
        new_model = (
            "apiVersion: goondan.ai/v1\nkind: Model\nmetadata: {name: v2}\n"
            "spec: {provider: scripted, model: v2, options: {defaultReply: 'v2 {input}'}}\n---\n"
        )
        head, alpha_doc = text.split("  name: alpha\n", 1)
        alpha_doc = alpha_doc.replace("modelRef: Model/scripted", "modelRef: Model/v2", 1)
        yaml.write_text(new_model + head + "  name: alpha\n" + alpha_doc, encoding="utf-8")
        reply = await daemon.request(Reload(request_id="r1"))
        assert reply.ok, reply.error
        assert reply.result["agents"] == ["alpha"]
        assert reply.result["changed"] == ["Agent/alpha", "Model/v2"]
        assert (await daemon.send("one", "alpha")).result["input"] == "v2 one"
        assert (await daemon.send("two", "beta")).result["input"] == "two"
        after = await pids(daemon)
        assert after["beta"] == before["beta"] and after["alpha"] != before["alpha"]


async def test_a_connection_edit_restarts_only_its_connector(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    async with asyncio.timeout(60):
        root = tmp_path / "hooks"
        shutil.copytree(
            FIXTURE.parents[1] / "connectors", root, ignore=shutil.ignore_patterns("cli")
        )
        env = {"HOOK_PORT": str(free_port()), "SIGNED_PORT": str(free_port())}
        env["SIGNED_SECRET"] = "reload-secret"
        daemon = await start_daemon(root, swarm="hooks", env=env)
        for name in ("hook", "signed"):
            await daemon.wait_for(
                "transition", process=f"connector:{name}:webhook:1", target="idle"
            )
        before = await pids(daemon)
        yaml = root / "goondan.yaml"
        text = yaml.read_text(encoding="utf-8")
        rule = "      - match: {event: message}\n"
        chat = "      - match: {event: chat}\n        route: {}\n"
        yaml.write_text(text.replace(rule, chat + rule), encoding="utf-8")
        reply = await daemon.request(Reload(request_id="r1"))
        assert reply.ok, reply.error
        assert (reply.result["connections"], reply.result["agents"]) == (["hook"], [])
        assert [p.split(":")[1] for p in reply.result["restarted"]] == ["hook"]
        after = await pids(daemon)
        assert after["signed"] == before["signed"] and after["hook"] != before["hook"]
        without_signed = yaml.read_text(encoding="utf-8").split("metadata: {name: signed}")[0]
        yaml.write_text(without_signed.rsplit("---", 1)[0], encoding="utf-8")
        reply = await daemon.request(Reload(request_id="r2"))
        assert reply.ok, reply.error
        assert reply.result["removed_connections"] == ["signed"]
        assert [p.split(":")[1] for p in reply.result["stopped"]] == ["signed"]
        assert "signed" not in await pids(daemon)
