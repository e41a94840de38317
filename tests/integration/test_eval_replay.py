"""Record and replay of model calls (docs/guides/evals.md, Record and replay): `goondan eval
--record DIR` against the fake OpenAI server, then `--replay DIR` with the server stopped; and
`Model.spec.recording` under `goondan run`. Real CLI, real daemon, real agent processes."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

from tests.integration.conftest import StartDaemon
from tests.integration.harness import run_cli
from tests.integration.test_eval import OPENAI_BUNDLE
from tests.unit.agent_process.fake_llm import FakeLLMServer, chat_completion, openai_stream

CASES = """\
agent: greeter
cases:
  - {name: says yes, input: hi, expect: {contains: "yes"}}
  - {name: says no, input: bye, expect: {contains: "yes"}}
  - {name: two turns, inputs: [one, two], expect: {equals: "yes again"}}
"""


def _rows(report: Path) -> list[dict[str, Any]]:
    rows = json.loads(report.read_text())["results"]
    keep = ("case", "repeat", "passed", "evaluator", "why", "tokens")
    return sorted(({k: r[k] for k in keep} for r in rows), key=lambda r: str(r["case"]))


async def _eval(*args: str) -> tuple[int, str, str]:
    async with asyncio.timeout(60):
        return await run_cli("eval", *args, "--concurrency", "1")


async def test_record_then_replay_offline_and_a_changed_prompt_fails(tmp_path: Path) -> None:
    bundle, tapes = tmp_path / "bundle", tmp_path / "tapes"
    bundle.mkdir()
    evals = tmp_path / "evals.yaml"
    evals.write_text(CASES)
    recorded, replayed = tmp_path / "recorded.json", tmp_path / "replayed.json"
    async with FakeLLMServer() as server:
        # concurrency 1: the cases ask in file order
        texts = ("yes", "no", "yes first", "yes again")
        server.replies = [(200, chat_completion(text)) for text in texts]
        url = f"http://127.0.0.1:{server.port}"
        (bundle / "goondan.yaml").write_text(OPENAI_BUNDLE.replace("__LLM__", url))
        code, out, err = await _eval(str(evals), "--bundle", str(bundle), "--record",
                                     str(tapes), "--json", str(recorded))  # fmt: skip
        assert len(server.requests) == 4, (out, err)
    assert code == 1, err  # `says no` fails on purpose: a failure is replayed too
    assert len(list(tapes.glob("*.json"))) == 4
    # the server is stopped: any request would fail its case with E_MODEL_CONNECTION; and CI
    # has no key: a replayed Model never reads it
    yaml = (bundle / "goondan.yaml").read_text()
    no_key = "apiKey: {valueFrom: {env: GOONDAN_TEST_UNSET_KEY}}"
    (bundle / "goondan.yaml").write_text(yaml.replace("apiKey: {value: sk-test}", no_key))
    assert no_key in (bundle / "goondan.yaml").read_text()
    code, out, err = await _eval(str(evals), "--bundle", str(bundle), "--replay", str(tapes),
                                 "--json", str(replayed))  # fmt: skip
    assert code == 1, err
    assert _rows(replayed) == _rows(recorded)
    assert [r["passed"] for r in _rows(replayed)] == [False, True, True]

    yaml = (bundle / "goondan.yaml").read_text()
    (bundle / "goondan.yaml").write_text(yaml.replace("Say yes.", "Say yes, politely."))
    code, out, err = await _eval(str(evals), "--bundle", str(bundle), "--replay", str(tapes),
                                 "--json", str(replayed))  # fmt: skip
    assert code == 1, err
    rows = _rows(replayed)
    assert not any(r["passed"] for r in rows)
    assert all(str(r["why"]).startswith("E_REPLAY_MISSING: agent greeter, step 1:") for r in rows)
    assert "E_REPLAY_MISSING" in out


async def test_replay_needs_a_directory(tmp_path: Path) -> None:
    evals = tmp_path / "evals.yaml"
    evals.write_text(CASES)
    code, _, err = await _eval(str(evals), "--replay", str(tmp_path / "nowhere"))
    assert code == 2 and "--replay" in err
    code, _, err = await _eval(str(evals), "--replay", "a", "--record", "b")
    assert code == 2 and "--record" in err
    code, _, err = await _eval(str(evals), "--replay", str(tmp_path), "--attach")
    assert code == 2 and "--attach" in err


RUN_BUNDLE = OPENAI_BUNDLE.replace(
    "options: {maxRetries: 0, timeoutSeconds: 5}",
    "options: {maxRetries: 0, timeoutSeconds: 5}\n  recording: {mode: __MODE__, dir: tapes}",
)


async def _stop(daemon: Any) -> None:
    daemon.signal(signal.SIGTERM)
    assert await daemon.wait() == 0


async def _streamed(instance: str) -> list[str]:
    """`goondan send --json hello` to a new instance: the texts of its deltas, which make the
    reply."""
    code, out, err = await run_cli("send", "--json", "--instance", instance, "hello")
    assert code == 0, err
    *deltas, final = [json.loads(line) for line in out.splitlines()]
    assert {d["type"] for d in deltas} == {"text.delta"}
    texts = [str(d["text"]) for d in deltas]
    assert "".join(texts) == final["input"]
    return texts


async def test_goondan_run_records_and_replays_a_streamed_turn(
    start_daemon: StartDaemon, tmp_path: Path
) -> None:
    bundle = tmp_path / "goondan.yaml"
    async with asyncio.timeout(90):
        async with FakeLLMServer() as server:
            # a gap: each piece is read, and sent as a delta, on its own
            server.replies = [(200, openai_stream(["rec", "orded ", "yes"], gap=0.05))]
            url = f"http://127.0.0.1:{server.port}"
            bundle.write_text(RUN_BUNDLE.replace("__LLM__", url).replace("__MODE__", "record"))
            daemon = await start_daemon(bundle, swarm="evalswarm")
            assert await _streamed("first") == ["rec", "orded ", "yes"]
            await _stop(daemon)
        [tape] = (tmp_path / "tapes").glob("*.json")
        assert json.loads(tape.read_text())["chunks"] == ["rec", "orded ", "yes"]
        # `replay: DIR`, the one-line form of `recording: {mode: replay, dir: DIR}`
        bundle.write_text(
            bundle.read_text().replace("recording: {mode: record, dir: tapes}", "replay: tapes")
        )
        daemon = await start_daemon(bundle, swarm="evalswarm")
        # a fresh conversation, streamed again: the recorded pieces come back as deltas
        assert await _streamed("second") == ["rec", "orded ", "yes"]
        reply = await daemon.send("something else", "greeter", key="third")
        assert reply.error is not None and reply.error.code == "E_REPLAY_MISSING"
        assert "agent greeter, step 1" in reply.error.message
