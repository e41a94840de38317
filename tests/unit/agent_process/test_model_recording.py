"""Record and replay of model calls (agent_process/models/recording.py): the request's key, the
files under DIR (hostile ones included), streamed replies served as the same deltas."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agent_process.catalog import CatalogItem
from agent_process.models import (
    ModelError,
    ModelRequest,
    ModelResponse,
    Usage,
    create_model,
    recording,
    replay_key,
    replay_store,
)
from agent_process.models.fallback import falls_back
from bundles import redact
from bundles.kinds import Kind, Metadata, ModelSpec, Recording
from bundles.model import Resource, SourceLocation
from protocol.conversation import Role, ToolCall, new_message
from protocol.errors import ErrorCode

TIMEOUT = 10


def _resource(tmp_path: Path, mode: str | None = None) -> Resource[ModelSpec]:
    spec = ModelSpec(provider="scripted", model="m", options={"defaultReply": "live {input}"})
    if mode is not None:
        taped = Recording(mode=mode, dir="tapes")  # type: ignore[arg-type]
        spec = msgspec.structs.replace(spec, recording=taped)
    where = SourceLocation(tmp_path / "goondan.yaml", 1, 0)
    return Resource(kind=Kind.MODEL, metadata=Metadata(name="gpt"), spec=spec, location=where,
                    root=tmp_path)  # fmt: skip


def _conversation(system: str = "Be brief.", call_id: str = "call_x9") -> ModelRequest:
    """hi -> the model calls `t` -> its result: fresh message ids and times on every call."""
    messages = [
        new_message(Role.USER, "hi"),
        new_message(Role.ASSISTANT, "", tool_calls=[ToolCall(id=call_id, name="t", args={"a": 1})]),
        new_message(Role.TOOL, "42", tool_call_id=call_id, tool_name="t"),
    ]
    tools = [CatalogItem(name="t", description="a tool", parameters={"type": "object"})]
    return ModelRequest(system=system, messages=messages, tools=tools, params={"temperature": 0})


def _key(request: ModelRequest) -> str:
    return replay_key.request_hash(replay_key.normalized("openai", "gpt-x", request))


def test_the_key_is_stable_across_runs_and_tool_call_ids() -> None:
    assert _key(_conversation()) == _key(_conversation(call_id="call_other"))


def test_the_key_changes_with_the_prompt_the_input_a_tool_or_a_param() -> None:
    base = _conversation()
    changed = [
        _conversation(system="Be long."),
        msgspec.structs.replace(base, messages=[new_message(Role.USER, "hello")]),
        msgspec.structs.replace(base, tools=[CatalogItem(name="t", description="other")]),
        msgspec.structs.replace(base, params={"temperature": 1}),
    ]
    keys = {_key(base), *(_key(r) for r in changed)}
    assert len(keys) == 5
    shape = replay_key.normalized("anthropic", "gpt-x", base)
    assert replay_key.request_hash(shape) != _key(base)


def test_the_step_counts_the_model_calls_since_the_user_spoke() -> None:
    assert replay_key.step_of(_conversation()) == 2
    assert replay_key.step_of(ModelRequest(system=None, messages=[], tools=[])) == 1


class Inner:
    """A provider that streams its reply in two pieces and counts its calls."""

    name = "inner"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        if request.on_text is not None:
            request.on_text("Hel")
            request.on_text("lo")
        return ModelResponse(text="Hello", usage=Usage(input_tokens=3, output_tokens=2))

    async def aclose(self) -> None:
        pass


def _taped(tmp_path: Path, mode: str, inner: Any) -> Any:
    return recording.wrap(inner, _resource(tmp_path, mode), agent="greeter")


async def test_a_recorded_stream_is_replayed_as_the_same_deltas(tmp_path: Path) -> None:
    inner = Inner()
    seen: list[str] = []
    request = msgspec.structs.replace(_conversation(), on_text=seen.append)
    async with asyncio.timeout(TIMEOUT):
        live = await _taped(tmp_path, "record", inner).complete(request)
        replayed: list[str] = []
        replay = _taped(tmp_path, "replay", inner)
        again = await replay.complete(msgspec.structs.replace(request, on_text=replayed.append))
    assert seen == replayed == ["Hel", "lo"]
    assert again == live and inner.calls == 1  # the replay never called the provider
    assert [p.name for p in (tmp_path / "tapes").iterdir()] == [f"{_key_of(request)}.json"]


def _key_of(request: ModelRequest) -> str:
    return replay_key.request_hash(replay_key.normalized("scripted", "m", request))


async def test_a_request_without_recording_is_e_replay_missing(tmp_path: Path) -> None:
    inner = Inner()
    request = _conversation()
    with pytest.raises(ModelError) as caught:
        async with asyncio.timeout(TIMEOUT):
            await _taped(tmp_path, "replay", inner).complete(request)
    assert caught.value.info.code == "E_REPLAY_MISSING"
    assert f"agent greeter, step 2: no recording of request {_key_of(request)}" in str(caught.value)
    assert inner.calls == 0


def _bad_json(kind: str, key: str) -> bytes:
    """A recording file's content that is JSON but not a valid recording of `key`."""
    good = replay_store.Stored(format=1, key=key, response=ModelResponse(text="x"))
    negative = ModelResponse(text="x", usage=Usage(input_tokens=-500))
    foreign = replay_store.StoredError(code="E_AGENT_BUDGET_EXCEEDED", message="x")
    bad = {
        "wrong types": {"format": 1, "key": key, "response": {"text": 5}},
        "other key": msgspec.structs.replace(good, key="0" * 64),
        "negative tokens": msgspec.structs.replace(good, response=negative),
        "neither": msgspec.structs.replace(good, response=None),
        "foreign error": msgspec.structs.replace(good, response=None, error=foreign),
        "old format": msgspec.structs.replace(good, format=0),
    }
    return msgspec.json.encode(bad[kind])


def _hostile(tmp_path: Path, kind: str, key: str) -> None:
    tapes = tmp_path / "tapes"
    tapes.mkdir()
    path = tapes / f"{key}.json"
    match kind:
        case "garbage":
            path.write_bytes(b"\x00\xffnot json{")
        case "huge":
            with path.open("wb") as f:
                f.truncate(replay_store.MAX_BYTES + 10)
        case "symlink out":
            good = replay_store.Stored(format=1, key=key, response=ModelResponse(text="x"))
            outside = tmp_path / "outside.json"
            outside.write_bytes(msgspec.json.encode(good))
            path.symlink_to(outside)
        case "fifo":
            os.mkfifo(path)
        case "directory":
            path.mkdir()
        case _:
            path.write_bytes(_bad_json(kind, key))


HOSTILE = ("garbage", "huge", "wrong types", "other key", "negative tokens", "symlink out",
           "neither", "foreign error", "old format", "fifo", "directory")  # fmt: skip


@pytest.mark.parametrize("kind", HOSTILE)
async def test_a_hostile_recording_is_e_replay_invalid(tmp_path: Path, kind: str) -> None:
    request = _conversation()
    _hostile(tmp_path, kind, _key_of(request))
    with pytest.raises(ModelError) as caught:
        async with asyncio.timeout(TIMEOUT):
            await _taped(tmp_path, "replay", Inner()).complete(request)
    assert caught.value.info.code == "E_REPLAY_INVALID"


async def test_a_recording_dir_that_cannot_be_written_is_e_record_failed(tmp_path: Path) -> None:
    (tmp_path / "tapes").write_text("a file, not a directory")
    with pytest.raises(ModelError) as caught:
        async with asyncio.timeout(TIMEOUT):
            await _taped(tmp_path, "record", Inner()).complete(_conversation())
    assert caught.value.info.code == "E_RECORD_FAILED"


def test_writers_sharing_a_dir_leave_whole_files_and_no_temporaries(tmp_path: Path) -> None:
    key = "a" * 64
    stored = [replay_store.Stored(format=1, key=key, response=ModelResponse(text=str(i) * 5000))
              for i in range(8)]  # fmt: skip
    threads = [threading.Thread(target=replay_store.write, args=(tmp_path, s)) for s in stored]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert [p.name for p in tmp_path.iterdir()] == [f"{key}.json"]
    assert replay_store.read(tmp_path, key).response in [s.response for s in stored]


def test_the_environment_wins_over_the_spec_and_a_bad_value_is_coded(tmp_path: Path) -> None:
    resource = _resource(tmp_path, "record")
    assert recording.setting_of(resource, {}) == recording.Setting("record", tmp_path / "tapes")
    env = {recording.ENV: f"replay:{tmp_path / 'ci'}"}
    assert recording.setting_of(resource, env) == recording.Setting("replay", tmp_path / "ci")
    assert recording.setting_of(_resource(tmp_path), {}) is None
    with pytest.raises(ModelError) as caught:
        recording.setting_of(resource, {recording.ENV: "rewind:/x"})
    assert caught.value.info.code == "E_MODEL_BAD_REQUEST"


async def test_create_model_replays_a_scripted_model_without_running_it(tmp_path: Path) -> None:
    request = ModelRequest(system=None, messages=[new_message(Role.USER, "hi")], tools=[])
    async with asyncio.timeout(TIMEOUT):
        recorded = await create_model(_resource(tmp_path, "record"), api_key=None).complete(request)
        rehearsal = create_model(_resource(tmp_path, "replay"), api_key=None, recorded=False)
        assert (await rehearsal.complete(request)).text == "live hi"
        replayed = await create_model(_resource(tmp_path, "replay"), api_key=None).complete(request)
    assert recorded.text == replayed.text == "live hi"


def test_only_a_replayed_model_goes_without_its_key(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.delenv(recording.ENV, raising=False)
    assert recording.replays(_resource(tmp_path, "replay"))
    assert not recording.replays(_resource(tmp_path, "record"))
    assert not recording.replays(_resource(tmp_path))
    monkeypatch.setenv(recording.ENV, f"replay:{tmp_path}")
    assert recording.replays(_resource(tmp_path))


class Limited(Inner):
    """A provider that answers 429."""

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        raise ModelError(ErrorCode.E_MODEL_RATE_LIMIT, "slow down", status=429)


async def test_a_recorded_failure_is_replayed_and_still_falls_back(tmp_path: Path) -> None:
    inner = Limited()
    failed: list[ModelError] = []
    async with asyncio.timeout(TIMEOUT):
        for mode in ("record", "replay"):
            with pytest.raises(ModelError) as caught:
                await _taped(tmp_path, mode, inner).complete(_conversation())
            failed.append(caught.value)
    assert inner.calls == 1
    assert [(e.info.code, e.status) for e in failed] == [("E_MODEL_RATE_LIMIT", 429)] * 2
    assert falls_back(failed[1])  # a fallback chain moves on under replay as it did live


async def test_the_bundles_secrets_are_masked_in_the_request_copy(tmp_path: Path) -> None:
    request = msgspec.structs.replace(_conversation(), system="key: sk-live-SECRET")
    redact.install(["sk-live-SECRET"])
    try:
        async with asyncio.timeout(TIMEOUT):
            await _taped(tmp_path, "record", Inner()).complete(request)
    finally:
        redact.install([])
    [tape] = (tmp_path / "tapes").iterdir()
    assert b"SECRET" not in tape.read_bytes()
    assert tape.name == f"{_key_of(request)}.json"  # keyed by the request as sent
