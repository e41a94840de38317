"""The scripted model: rule matching on the latest input, afterTool, templating, script files."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent_process.models import ModelError, ModelRequest, ModelResponse
from agent_process.models.scripted import ScriptedModel
from protocol.conversation import Role, new_message


def model(script: list[dict[str, object]], **options: object) -> ScriptedModel:
    return ScriptedModel.from_options("m", {"script": script, **options}, Path("."))


async def ask(m: ScriptedModel, *messages: tuple[Role, str, str | None]) -> ModelResponse:
    msgs = [new_message(role, text, tool_name=tool) for role, text, tool in messages]
    async with asyncio.timeout(5):
        return await m.complete(ModelRequest(system="s", messages=msgs, tools=[]))


async def test_first_matching_rule_answers_and_templates_fill_in() -> None:
    m = model(
        [
            {
                "match": "^weather in (\\w+)",
                "toolCalls": [{"name": "w__get", "args": {"q": "{input}", "n": [1, "{input}"]}}],
            },
            {"match": "hello", "reply": "hi! you said {input}"},
            {"afterTool": "w__get", "reply": "forecast: {last_tool_result} from {last_tool_name}"},
        ]
    )
    greet = await ask(m, (Role.USER, "well hello", None))
    assert greet.text == "hi! you said well hello" and not greet.tool_calls
    call = await ask(m, (Role.USER, "weather in Seoul", None))
    assert call.tool_calls[0].args == {"q": "weather in Seoul", "n": [1, "weather in Seoul"]}
    assert call.finish_reason == "tool_calls"
    after = await ask(
        m,
        (Role.USER, "weather in Seoul", None),
        (Role.ASSISTANT, "", None),
        (Role.TOOL, '{"status":"ok","output":"sun"}', "w__get"),
    )
    assert after.text == 'forecast: {"status":"ok","output":"sun"} from w__get'


async def test_rules_without_after_tool_do_not_fire_after_a_tool_and_vice_versa() -> None:
    m = model(
        [{"match": "x", "toolCalls": [{"name": "t__a"}]}, {"afterTool": "*", "reply": "any tool"}],
        defaultReply="default for {input}",
    )
    after = await ask(m, (Role.USER, "x", None), (Role.TOOL, "{}", "t__b"))
    assert after.text == "any tool" and not after.tool_calls
    fresh = await ask(m, (Role.USER, "nothing matches", None))
    assert fresh.text == "default for nothing matches"
    assert fresh.usage.input_tokens > 0


async def test_script_file_rules_are_appended(tmp_path: Path) -> None:
    (tmp_path / "script.yaml").write_text("- match: ping\n  reply: pong\n")
    m = ScriptedModel.from_options("m", {"scriptFile": "script.yaml"}, tmp_path)
    assert (await ask(m, (Role.USER, "ping", None))).text == "pong"


@pytest.mark.parametrize(
    "options",
    [{"script": [{"match": "("}]}, {"script": [{"bogus": 1}]}, {"scriptFile": "missing.yaml"}],
)
def test_bad_scripts_are_coded_errors(options: dict[str, object]) -> None:
    with pytest.raises(ModelError) as caught:
        ScriptedModel.from_options("m", options, Path("/nonexistent"))
    assert caught.value.info.code == "E_MODEL_SCRIPT"


async def streamed(m: ScriptedModel, text: str) -> tuple[ModelResponse, list[str]]:
    pieces: list[str] = []
    msgs = [new_message(Role.USER, text)]
    async with asyncio.timeout(5):
        request = ModelRequest(system="s", messages=msgs, tools=[], on_text=pieces.append)
        return await m.complete(request), pieces


async def test_a_streamed_reply_comes_in_chunks_and_the_response_is_unchanged() -> None:
    m = model([{"match": "long", "reply": "abcdefghij", "streamChunkChars": 4}],
              streamChunkChars=3)  # fmt: skip
    response, pieces = await streamed(m, "long")
    assert pieces == ["abcd", "efgh", "ij"]  # the rule's size wins over the model's
    assert response.text == "abcdefghij"
    plain = await ask(m, (Role.USER, "long", None))
    assert (plain.text, plain.usage, plain.finish_reason) == (
        response.text, response.usage, response.finish_reason
    )  # fmt: skip
    _, whole = await streamed(model([{"reply": "hello"}]), "x")
    assert whole == ["hello"]  # no chunk size: one piece
    _, by_model = await streamed(model([{"reply": "hello"}], streamChunkChars=2), "x")
    assert by_model == ["he", "ll", "o"]


async def test_a_tool_call_step_streams_no_text() -> None:
    m = model([{"toolCalls": [{"name": "t__x"}]}], streamChunkChars=1)
    response, pieces = await streamed(m, "go")
    assert pieces == [] and response.tool_calls[0].name == "t__x"


@pytest.mark.parametrize(
    "options",
    [
        {"streamChunkChars": -1},
        {"streamDelayMs": -5},
        {"script": [{"reply": "x", "streamChunkChars": -2}]},
    ],
)
def test_negative_stream_settings_are_a_coded_error(options: dict[str, object]) -> None:
    with pytest.raises(ModelError) as info:
        ScriptedModel.from_options("m", options, Path("."))
    error = info.value.info
    assert error.code == "E_MODEL_SCRIPT" and "must be 0 or more" in error.message
