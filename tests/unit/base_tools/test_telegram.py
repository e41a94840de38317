"""telegram tool against a fake Bot API on 127.0.0.1: requests on the wire, results, coded
errors (ok:false, 5xx, 429 with retry_after), token handling and confined downloads."""

from __future__ import annotations

import os
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.unit.agent_process import builders as b
from tests.unit.agent_process.helpers import make_runtime, tool_results, turn

from .conftest import BASE_DOCS, FakeContext, base_resource, load_tool
from .fake_chat_api import FakeApi, ok, raw, run_tool, serve, tool_failure

telegram = load_tool("tools/telegram.py")
TOKEN = "123456:SECRET-token"
BOT = f"/bot{TOKEN}"


@pytest.fixture
def tg(workdir: Path, api: FakeApi) -> FakeContext:
    return FakeContext(workdir=workdir, config={"token": TOKEN, "apiBaseUrl": api.url})


run = partial(run_tool, telegram)
failure = partial(tool_failure, telegram, token=TOKEN)


def sent(chat: int = 42, message_id: int = 7) -> Any:
    return ok({"ok": True, "result": {"message_id": message_id, "chat": {"id": chat}, "date": 1}})


async def test_send_posts_send_message_with_the_documented_fields(
    tg: FakeContext, api: FakeApi
) -> None:
    api.on(f"{BOT}/sendMessage", sent())
    result = await run(
        tg,
        "send",
        {"chatId": 42, "text": "*hi*", "parseMode": "MarkdownV2", "replyToMessageId": 3},
    )
    assert result == {"ok": True, "messageId": 7, "chatId": 42, "date": 1}
    [request] = api.requests
    assert (request.method, request.path) == ("POST", f"{BOT}/sendMessage")
    assert request.headers["content-type"] == "application/json"
    assert request.json == {
        "chat_id": 42,
        "text": "*hi*",
        "parse_mode": "MarkdownV2",
        "reply_parameters": {"message_id": 3},
    }


@pytest.mark.parametrize(
    ("export", "args", "method", "body"),
    [
        (
            "edit",
            {"chatId": "@chan", "messageId": 7, "text": "new"},
            "editMessageText",
            {"chat_id": "@chan", "text": "new", "message_id": 7},
        ),
        (
            "delete",
            {"chatId": 42, "messageId": 7},
            "deleteMessage",
            {"chat_id": 42, "message_id": 7},
        ),
        (
            "react",
            {"chatId": 42, "messageId": 7, "emoji": "👍"},
            "setMessageReaction",
            {"chat_id": 42, "message_id": 7, "reaction": [{"type": "emoji", "emoji": "👍"}]},
        ),
        (
            "react",
            {"chatId": 42, "messageId": 7},
            "setMessageReaction",
            {"chat_id": 42, "message_id": 7, "reaction": []},
        ),
        ("setChatAction", {"chatId": 42}, "sendChatAction", {"chat_id": 42, "action": "typing"}),
        (
            "setChatAction",
            {"chatId": 42, "action": "upload_document"},
            "sendChatAction",
            {"chat_id": 42, "action": "upload_document"},
        ),
    ],
)
async def test_each_export_calls_its_bot_api_method(
    tg: FakeContext,
    api: FakeApi,
    export: str,
    args: dict[str, Any],
    method: str,
    body: dict[str, Any],
) -> None:
    api.on(f"{BOT}/{method}", sent() if export == "edit" else ok({"ok": True, "result": True}))
    result = await run(tg, export, args)
    assert result["ok"] is True
    [request] = api.requests
    assert (request.method, request.path, request.json) == ("POST", f"{BOT}/{method}", body)


async def test_api_error_is_coded_with_telegrams_description(tg: FakeContext, api: FakeApi) -> None:
    error = {"ok": False, "error_code": 400, "description": "Bad Request: chat not found"}
    api.on(f"{BOT}/sendMessage", ok(error, status=400))
    failed = await failure(tg, "send", {"chatId": 1, "text": "x"})
    assert failed.code == "E_TOOL_API"
    assert "chat not found" in failed.message
    assert "HTTP 400" in failed.message

    api.on(f"{BOT}/sendMessage", ok({"ok": False, "description": "Unauthorized"}, status=401))
    failed = await failure(tg, "send", {"chatId": 1, "text": "x"})
    assert failed.suggestion is not None
    assert "token" in failed.suggestion


async def test_server_error_without_json_is_e_tool_http(tg: FakeContext, api: FakeApi) -> None:
    api.on(f"{BOT}/sendMessage", raw(b"<html>bad gateway</html>", 502, "text/html"))
    failed = await failure(tg, "send", {"chatId": 1, "text": "x"})
    assert failed.code == "E_TOOL_HTTP"
    assert "HTTP 502" in failed.message


def too_many(retry_after: int) -> Any:
    body = {
        "ok": False,
        "error_code": 429,
        "description": f"Too Many Requests: retry after {retry_after}",
        "parameters": {"retry_after": retry_after},
    }
    return ok(body, status=429)


async def test_a_short_429_is_retried_once(tg: FakeContext, api: FakeApi) -> None:
    api.on(f"{BOT}/sendMessage", too_many(0), sent())
    result = await run(tg, "send", {"chatId": 42, "text": "x"})
    assert result["messageId"] == 7
    assert api.paths() == [f"{BOT}/sendMessage"] * 2


async def test_a_long_429_fails_at_once_with_the_delay(tg: FakeContext, api: FakeApi) -> None:
    api.on(f"{BOT}/sendMessage", too_many(30))
    failed = await failure(tg, "send", {"chatId": 42, "text": "x"})
    assert failed.code == "E_TOOL_RATE_LIMITED"
    assert "retry after 30 s" in failed.message
    assert len(api.requests) == 1


async def test_repeated_429_stops_after_max_retries(tg: FakeContext, api: FakeApi) -> None:
    api.on(f"{BOT}/sendMessage", too_many(0))
    failed = await failure(
        replace(tg, config={**tg.config, "maxRetries": 2}), "send", {"chatId": 42, "text": "x"}
    )
    assert failed.code == "E_TOOL_RATE_LIMITED"
    assert len(api.requests) == 3


async def test_download_saves_inside_the_workspace(
    tg: FakeContext, api: FakeApi, workdir: Path
) -> None:
    info = {"file_id": "F1", "file_path": "photos/file_1.jpg", "file_size": 5}
    api.on(f"{BOT}/getFile", ok({"ok": True, "result": info}))
    api.on(f"/file{BOT}/photos/file_1.jpg", raw(b"\xff\xd8JPG"))
    result = await run(tg, "downloadFile", {"fileId": "F1"})
    assert result == {"ok": True, "path": "downloads/file_1.jpg", "bytes": 5, "fileId": "F1"}
    assert (workdir / "downloads" / "file_1.jpg").read_bytes() == b"\xff\xd8JPG"
    assert api.requests[0].json == {"file_id": "F1"}
    assert api.requests[1].method == "GET"

    again = await run(tg, "downloadFile", {"fileId": "F1"})
    assert again["path"] == "downloads/file_1-1.jpg"  # a default name is never overwritten
    custom = await run(tg, "downloadFile", {"fileId": "F1", "path": "in/photo.jpg"})
    assert custom["path"] == "in/photo.jpg"
    exists = await failure(tg, "downloadFile", {"fileId": "F1", "path": "in/photo.jpg"})
    assert exists.code == "E_TOOL_PATH_EXISTS"


@pytest.mark.parametrize("path", ["../outside/x.jpg", "/etc/evil.jpg", "link/x.jpg"])
async def test_download_refuses_paths_outside_the_workspace(
    tg: FakeContext, api: FakeApi, workdir: Path, path: str
) -> None:
    os.symlink(workdir.parent / "outside", workdir / "link")
    api.on(f"{BOT}/getFile", ok({"ok": True, "result": {"file_path": "a/b.jpg"}}))
    api.on(f"/file{BOT}/a/b.jpg", raw(b"data"))
    failed = await failure(tg, "downloadFile", {"fileId": "F1", "path": path})
    assert failed.code == "E_TOOL_PATH_ESCAPE"
    assert not (workdir.parent / "outside" / "x.jpg").exists()


async def test_download_over_the_cap_leaves_no_file(
    tg: FakeContext, api: FakeApi, workdir: Path
) -> None:
    small = replace(tg, config={**tg.config, "maxDownloadBytes": 10})
    api.on(f"{BOT}/getFile", ok({"ok": True, "result": {"file_path": "docs/big.bin"}}))
    api.on(f"/file{BOT}/docs/big.bin", raw(b"x" * 1000))
    failed = await failure(small, "downloadFile", {"fileId": "F2"})
    assert failed.code == "E_TOOL_FILE_TOO_LARGE"
    assert list((workdir / "downloads").iterdir()) == []

    api.on(f"{BOT}/getFile", ok({"ok": True, "result": {"file_path": "d/x", "file_size": 99}}))
    early = await failure(small, "downloadFile", {"fileId": "F3"})
    assert early.code == "E_TOOL_FILE_TOO_LARGE"
    assert api.paths()[-1] == f"{BOT}/getFile"  # refused before downloading


async def test_token_from_an_environment_variable(
    workdir: Path, api: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.on(f"{BOT}/sendChatAction", ok({"ok": True, "result": True}))
    monkeypatch.setenv("MY_TG_TOKEN", TOKEN)
    by_name = FakeContext(
        workdir=workdir, config={"tokenEnv": "MY_TG_TOKEN", "apiBaseUrl": api.url}
    )
    await run(by_name, "setChatAction", {"chatId": 1})
    source = {"token": {"valueFrom": {"env": "MY_TG_TOKEN"}}, "apiBaseUrl": api.url}
    await run(FakeContext(workdir=workdir, config=source), "setChatAction", {"chatId": 1})
    assert api.paths() == [f"{BOT}/sendChatAction"] * 2

    monkeypatch.delenv("TELEGRAM_BOT_TOKEN", raising=False)
    missing = await failure(FakeContext(workdir=workdir), "send", {"chatId": 1, "text": "x"})
    assert "TELEGRAM_BOT_TOKEN" in missing.message


async def test_a_connection_error_is_coded_and_hides_the_token(workdir: Path) -> None:
    with serve() as gone:
        url = gone.url  # the port is closed once the server is gone
    ctx = FakeContext(workdir=workdir, config={"token": TOKEN, "apiBaseUrl": url})
    failed = await failure(ctx, "send", {"chatId": 1, "text": "x"})
    assert failed.code == "E_TOOL_HTTP"


def test_the_manifest_declares_the_documented_exports() -> None:
    exports = [e["name"] for e in BASE_DOCS["Tool", "telegram"]["spec"]["exports"]]
    assert exports == ["send", "edit", "delete", "react", "setChatAction", "downloadFile"]
    assert set(telegram.handlers) == set(exports)


async def test_calls_through_the_real_executor(api: FakeApi) -> None:
    """Schema checks (additionalProperties: false) and handler dispatch in a real runtime."""
    api.on(f"{BOT}/sendMessage", sent())
    script: list[dict[str, Any]] = [
        {
            "match": "go",
            "toolCalls": [
                {"name": "telegram__send", "args": {"chatId": 42, "text": "hello"}},
                {"name": "telegram__send", "args": {"chatId": 42, "text": "x", "bogus": 1}},
            ],
        },
        {"afterTool": "*", "reply": "done"},
    ]
    rt = await make_runtime(
        b.scripted(script=script),
        b.agent(tools=["telegram"]),
        base_resource("Tool", "telegram", token=TOKEN, apiBaseUrl=api.url),
    )
    try:
        await turn(rt, "go")
        results = tool_results(rt)
    finally:
        await rt.close()
    assert results[0]["status"] == "ok"
    assert results[0]["output"]["messageId"] == 7
    assert results[1]["error"]["code"] == "E_TOOL_INVALID_ARGS"
    assert len(api.requests) == 1
