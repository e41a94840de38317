"""slack tool against a fake Web API on 127.0.0.1: methods, bearer auth, bodies and query
parameters on the wire, results, coded errors (ok:false, 5xx, 429 Retry-After), downloads
that never send the token to a foreign host."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from .conftest import FakeContext, load_tool
from .fake_chat_api import FakeApi, Reply, ok, raw, run_tool, tool_failure

slack = load_tool("tools/slack.py")
TOKEN = "xoxb-secret-token"


@pytest.fixture
def sl(workdir: Path, api: FakeApi) -> FakeContext:
    return FakeContext(workdir=workdir, config={"token": TOKEN, "apiBaseUrl": api.url})


run = partial(run_tool, slack)
failure = partial(tool_failure, slack, token=TOKEN)


async def test_send_posts_json_with_the_bearer_token(sl: FakeContext, api: FakeApi) -> None:
    api.on("/chat.postMessage", ok({"ok": True, "channel": "C1", "ts": "1700.01"}))
    result = await run(sl, "send", {"channel": "C1", "text": "hi", "threadTs": "1699.5"})
    assert result == {"ok": True, "channel": "C1", "ts": "1700.01", "threadTs": "1699.5"}
    [request] = api.requests
    assert (request.method, request.path) == ("POST", "/chat.postMessage")
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    assert request.headers["content-type"] == "application/json"
    assert request.json == {"channel": "C1", "text": "hi", "thread_ts": "1699.5"}


@pytest.mark.parametrize(
    ("export", "args", "method", "body"),
    [
        (
            "edit",
            {"channel": "C1", "ts": "1.2", "text": "new"},
            "/chat.update",
            {"channel": "C1", "ts": "1.2", "text": "new"},
        ),
        ("delete", {"channel": "C1", "ts": "1.2"}, "/chat.delete", {"channel": "C1", "ts": "1.2"}),
        (
            "react",
            {"channel": "C1", "ts": "1.2", "name": ":eyes:"},
            "/reactions.add",
            {"channel": "C1", "timestamp": "1.2", "name": "eyes"},
        ),
    ],
)
async def test_write_exports_post_their_method(
    sl: FakeContext,
    api: FakeApi,
    export: str,
    args: dict[str, Any],
    method: str,
    body: dict[str, Any],
) -> None:
    api.on(method, ok({"ok": True, "channel": "C1", "ts": "1.2"}))
    result = await run(sl, export, args)
    assert result["ok"] is True
    [request] = api.requests
    assert (request.method, request.path, request.json) == ("POST", method, body)
    assert request.headers["authorization"] == f"Bearer {TOKEN}"


HISTORY = {
    "ok": True,
    "messages": [
        {"ts": "2.0", "user": "U1", "text": "second", "files": [{"id": "F1", "name": "a.txt"}]},
        {"ts": "1.0", "bot_id": "B1", "text": "first", "thread_ts": "1.0", "reply_count": 2},
    ],
    "has_more": True,
    "response_metadata": {"next_cursor": "abc"},
}


async def test_read_gets_history_with_query_parameters(sl: FakeContext, api: FakeApi) -> None:
    api.on("/conversations.history", ok(HISTORY))
    result = await run(sl, "read", {"channel": "C1", "limit": 2, "oldest": "0.5"})
    [request] = api.requests
    assert (request.method, request.path) == ("GET", "/conversations.history")
    assert request.query == {"channel": "C1", "limit": "2", "oldest": "0.5"}
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    assert result["hasMore"] is True
    assert result["nextCursor"] == "abc"
    assert result["messages"] == [
        {
            "ts": "2.0",
            "user": "U1",
            "text": "second",
            "files": [{"id": "F1", "name": "a.txt", "mimetype": None}],
        },
        {"ts": "1.0", "user": "B1", "text": "first", "threadTs": "1.0", "replyCount": 2},
    ]


async def test_read_of_a_thread_uses_conversations_replies(sl: FakeContext, api: FakeApi) -> None:
    api.on("/conversations.replies", ok({"ok": True, "messages": [{"ts": "1.0", "text": "p"}]}))
    result = await run(sl, "read", {"channel": "C1", "threadTs": "1.0"})
    assert api.requests[0].query == {"channel": "C1", "limit": "20", "ts": "1.0"}
    assert [m["text"] for m in result["messages"]] == ["p"]


async def test_ok_false_is_e_tool_api_with_slacks_error(sl: FakeContext, api: FakeApi) -> None:
    api.on("/chat.postMessage", ok({"ok": False, "error": "channel_not_found"}))
    failed = await failure(sl, "send", {"channel": "C404", "text": "x"})
    assert failed.code == "E_TOOL_API"
    assert "channel_not_found" in failed.message

    api.on("/chat.postMessage", ok({"ok": False, "error": "invalid_auth"}))
    failed = await failure(sl, "send", {"channel": "C1", "text": "x"})
    assert failed.suggestion is not None
    assert "token" in failed.suggestion


async def test_http_5xx_is_e_tool_http(sl: FakeContext, api: FakeApi) -> None:
    api.on("/chat.delete", raw(b"upstream down", 503, "text/plain"))
    failed = await failure(sl, "delete", {"channel": "C1", "ts": "1.0"})
    assert failed.code == "E_TOOL_HTTP"
    assert "HTTP 503" in failed.message


def limited(seconds: str) -> Reply:
    return (
        raw(b"", 429, "text/plain")
        if not seconds
        else Reply(429, b"", {"Retry-After": seconds, "Content-Type": "text/plain"})
    )


async def test_429_retry_after_header(sl: FakeContext, api: FakeApi) -> None:
    api.on("/reactions.add", limited("0"), ok({"ok": True}))
    await run(sl, "react", {"channel": "C1", "ts": "1.0", "name": "eyes"})
    assert api.paths() == ["/reactions.add"] * 2

    api.on("/reactions.add", limited("60"))
    failed = await failure(sl, "react", {"channel": "C1", "ts": "1.0", "name": "eyes"})
    assert failed.code == "E_TOOL_RATE_LIMITED"
    assert "retry after 60 s" in failed.message
    assert len(api.requests) == 3

    api.on("/reactions.add", limited(""))
    failed = await failure(sl, "react", {"channel": "C1", "ts": "1.0", "name": "eyes"})
    assert failed.code == "E_TOOL_RATE_LIMITED"


async def test_download_by_file_id(sl: FakeContext, api: FakeApi, workdir: Path) -> None:
    info = {"ok": True, "file": {"name": "report.pdf", "url_private_download": f"{api.url}/f/1"}}
    api.on("/files.info", ok(info))
    api.on("/f/1", raw(b"%PDF-1.7"))
    result = await run(sl, "downloadFile", {"fileId": "F1"})
    assert result == {"ok": True, "path": "downloads/report.pdf", "bytes": 8, "name": "report.pdf"}
    assert (workdir / "downloads" / "report.pdf").read_bytes() == b"%PDF-1.7"
    assert api.requests[0].query == {"file": "F1"}
    assert api.requests[1].headers["authorization"] == f"Bearer {TOKEN}"


async def test_download_by_url_and_cap(sl: FakeContext, api: FakeApi, workdir: Path) -> None:
    api.on("/files-pri/T1-F2/notes.txt", raw(b"notes"))
    result = await run(sl, "downloadFile", {"url": f"{api.url}/files-pri/T1-F2/notes.txt"})
    assert result["path"] == "downloads/notes.txt"

    small = replace(sl, config={**sl.config, "maxDownloadBytes": 3})
    failed = await failure(
        small, "downloadFile", {"url": f"{api.url}/files-pri/T1-F2/notes.txt", "path": "n2.txt"}
    )
    assert failed.code == "E_TOOL_FILE_TOO_LARGE"
    assert not (workdir / "n2.txt").exists()


@pytest.mark.parametrize(
    "url",
    ["http://evil.example/steal", "https://evil.example/steal", "http://files.slack.com/x"],
)
async def test_download_never_sends_the_token_elsewhere(
    sl: FakeContext, api: FakeApi, url: str
) -> None:
    failed = await failure(sl, "downloadFile", {"url": url})
    assert failed.code == "E_TOOL_URL_INVALID"
    assert api.requests == []


async def test_download_path_stays_in_the_workspace(sl: FakeContext, api: FakeApi) -> None:
    api.on("/f/1", raw(b"x"))
    failed = await failure(sl, "downloadFile", {"url": f"{api.url}/f/1", "path": "../escape"})
    assert failed.code == "E_TOOL_PATH_ESCAPE"


async def test_download_needs_a_file(sl: FakeContext) -> None:
    failed = await failure(sl, "downloadFile", {})
    assert failed.code == "E_TOOL_INVALID_ARGS"


async def test_default_token_variable(
    workdir: Path, api: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.on("/chat.delete", ok({"ok": True}))
    monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)
    await run(
        FakeContext(workdir=workdir, config={"apiBaseUrl": api.url}),
        "delete",
        {"channel": "C1", "ts": "1.0"},
    )
    assert api.requests[0].headers["authorization"] == f"Bearer {TOKEN}"
    monkeypatch.delenv("SLACK_BOT_TOKEN")
    missing = await failure(FakeContext(workdir=workdir), "delete", {"channel": "C", "ts": "1"})
    assert "SLACK_BOT_TOKEN" in missing.message


async def test_a_slow_api_is_e_tool_timeout(sl: FakeContext, api: FakeApi) -> None:
    api.on("/chat.postMessage", Reply(hold=True))
    quick = replace(sl, config={**sl.config, "timeoutMs": 100})
    failed = await failure(quick, "send", {"channel": "C1", "text": "x"})
    assert failed.code == "E_TOOL_TIMEOUT"
    assert "100 ms" in failed.message
