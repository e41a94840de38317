"""`telegram`: Telegram Bot API operations (send, edit, delete, react, setChatAction,
downloadFile) with httpx.

Every call is `POST <apiBaseUrl>/bot<token>/<method>` with a JSON body; a reply with
`ok: false` is `E_TOOL_API` (Telegram's `description` in the message), a 429 is waited out when
its `retry_after` is short and otherwise `E_TOOL_RATE_LIMITED`. Downloads use `getFile` then
`GET <apiBaseUrl>/file/bot<token>/<file_path>` and land inside the workspace.

Settings (`Tool.spec.config`, see `_chatapi`): `token` / `botToken` or `tokenEnv` (default
`TELEGRAM_BOT_TOKEN`), `apiBaseUrl` (default https://api.telegram.org), `timeoutMs`, `proxy`,
`maxRetries`, `maxRetryAfterSeconds`, `maxDownloadBytes` (default 20 MB, the Bot API's own
limit), `downloadDir` (default `downloads`), `roots` (as file-system; default the workspace).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bundles.sdk import JsonObject, ToolContext, ToolFailed, load_sibling
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from bundles.base.tools import _chatapi, _workspace
else:
    _chatapi = load_sibling(__file__, "_chatapi")
    _workspace = load_sibling(__file__, "_workspace")

DEFAULT_BASE = "https://api.telegram.org"


def _api(ctx: ToolContext) -> _chatapi.Api:
    settings = _chatapi.Settings.from_config(
        ctx.config, tool="telegram", default_env="TELEGRAM_BOT_TOKEN", default_base=DEFAULT_BASE
    )
    return _chatapi.Api(settings)


async def _call(api: _chatapi.Api, method: str, body: JsonObject) -> Any:
    url = f"{api.settings.base_url}/bot{api.settings.token}/{method}"
    payload = await api.call("POST", url, method, json=body)
    return payload.get("result")


def _message_fields(result: Any) -> JsonObject:
    if not isinstance(result, dict):
        return {"ok": True}
    chat = result.get("chat") or {}
    return {
        "ok": True,
        "messageId": result.get("message_id"),
        "chatId": chat.get("id"),
        "date": result.get("date"),
    }


def _text_body(input: JsonObject) -> JsonObject:
    body: JsonObject = {"chat_id": input["chatId"], "text": input["text"]}
    if "parseMode" in input:
        body["parse_mode"] = input["parseMode"]
    if input.get("disableLinkPreview"):
        body["link_preview_options"] = {"is_disabled": True}
    return body


async def send(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """sendMessage: post text to a chat, optionally as a reply or silently."""
    body = _text_body(input)
    if "replyToMessageId" in input:
        body["reply_parameters"] = {"message_id": input["replyToMessageId"]}
    if "messageThreadId" in input:
        body["message_thread_id"] = input["messageThreadId"]
    if input.get("disableNotification"):
        body["disable_notification"] = True
    return _message_fields(await _call(_api(ctx), "sendMessage", body))


async def edit(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """editMessageText: replace the text of a message the bot sent."""
    body = {**_text_body(input), "message_id": input["messageId"]}
    return _message_fields(await _call(_api(ctx), "editMessageText", body))


async def delete(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """deleteMessage."""
    body = {"chat_id": input["chatId"], "message_id": input["messageId"]}
    await _call(_api(ctx), "deleteMessage", body)
    return {"ok": True, "chatId": input["chatId"], "messageId": input["messageId"]}


async def react(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """setMessageReaction: one emoji reaction; an empty or missing emoji removes the bot's."""
    emoji = str(input.get("emoji") or "")
    body: JsonObject = {
        "chat_id": input["chatId"],
        "message_id": input["messageId"],
        "reaction": [{"type": "emoji", "emoji": emoji}] if emoji else [],
    }
    if input.get("isBig"):
        body["is_big"] = True
    await _call(_api(ctx), "setMessageReaction", body)
    return {"ok": True, "messageId": input["messageId"], "emoji": emoji or None}


async def set_chat_action(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """sendChatAction: show "typing..." (or another action) for about 5 seconds."""
    body = {"chat_id": input["chatId"], "action": input.get("action", "typing")}
    await _call(_api(ctx), "sendChatAction", body)
    return {"ok": True, "action": body["action"]}


async def download_file(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """getFile, then stream the file into the workspace; returns its workspace path."""
    api = _api(ctx)
    file_id = str(input["fileId"])
    info = await _call(api, "getFile", {"file_id": file_id})
    file_path = info.get("file_path") if isinstance(info, dict) else None
    if not isinstance(file_path, str) or not file_path:
        raise ToolFailed(
            f"telegram getFile returned no file_path for {file_id!r}",
            code=ErrorCode.E_TOOL_API,
            suggestion="The file may be larger than the Bot API's 20 MB download limit.",
        )
    size = info.get("file_size")
    if isinstance(size, int) and size > api.settings.max_download:
        raise ToolFailed(
            f"the file is {size} bytes, more than maxDownloadBytes={api.settings.max_download}",
            code=ErrorCode.E_TOOL_FILE_TOO_LARGE,
        )
    workspace = _workspace.Workspace.from_context(ctx.workdir, ctx.config)
    name = _chatapi.safe_name(file_path, f"telegram-{file_id[:16]}")
    default = f"{api.settings.download_dir}/{name}"
    target = _chatapi.download_target(input.get("path"), default, workspace)
    url = f"{api.settings.base_url}/file/bot{api.settings.token}/{file_path}"
    written = await _chatapi.download(api, url, target)
    return {"ok": True, "path": workspace.display(target), "bytes": written, "fileId": file_id}


handlers = {
    "send": send,
    "edit": edit,
    "delete": delete,
    "react": react,
    "setChatAction": set_chat_action,
    "downloadFile": download_file,
}
