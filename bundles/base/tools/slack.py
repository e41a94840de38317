"""`slack`: Slack Web API operations (send, read, edit, delete, react, downloadFile) with httpx.

Write methods are `POST <apiBaseUrl>/<method>` with a JSON body, read methods `GET` with query
parameters; both carry `Authorization: Bearer <token>`. Slack answers most errors with HTTP 200
and `ok: false` (`E_TOOL_API` with Slack's error string, e.g. `channel_not_found`); a 429 is
waited out when its `Retry-After` is short and otherwise `E_TOOL_RATE_LIMITED`.

downloadFile sends the bot token, so it only fetches from the API's own origin or from https
hosts listed in `fileHosts` (default `files.slack.com`): a URL handed to the model elsewhere
never receives the token.

Settings (`Tool.spec.config`, see `_chatapi`): `token` / `botToken` or `tokenEnv` (default
`SLACK_BOT_TOKEN`), `apiBaseUrl` (default https://slack.com/api), `fileHosts`, `timeoutMs`,
`proxy`, `maxRetries`, `maxRetryAfterSeconds`, `maxDownloadBytes`, `downloadDir`, `roots`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import httpx

from bundles.sdk import JsonObject, ToolContext, ToolFailed, load_sibling
from protocol.errors import ErrorCode

if TYPE_CHECKING:
    from bundles.base.tools import _chatapi, _workspace
else:
    _chatapi = load_sibling(__file__, "_chatapi")
    _workspace = load_sibling(__file__, "_workspace")

DEFAULT_BASE = "https://slack.com/api"
DEFAULT_FILE_HOSTS = ("files.slack.com",)
DEFAULT_READ_LIMIT = 20


def _api(ctx: ToolContext) -> _chatapi.Api:
    settings = _chatapi.Settings.from_config(
        ctx.config, tool="slack", default_env="SLACK_BOT_TOKEN", default_base=DEFAULT_BASE
    )
    return _chatapi.Api(settings, {"Authorization": f"Bearer {settings.token}"})


async def _post(api: _chatapi.Api, method: str, body: JsonObject) -> JsonObject:
    return await api.call("POST", f"{api.settings.base_url}/{method}", method, json=body)


async def _get(api: _chatapi.Api, method: str, params: Mapping[str, Any]) -> JsonObject:
    return await api.call("GET", f"{api.settings.base_url}/{method}", method, params=params)


async def send(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """chat.postMessage: post text to a channel, or into a thread with threadTs."""
    body: JsonObject = {"channel": input["channel"], "text": input["text"]}
    if "threadTs" in input:
        body["thread_ts"] = input["threadTs"]
        if input.get("replyBroadcast"):
            body["reply_broadcast"] = True
    if "mrkdwn" in input:
        body["mrkdwn"] = input["mrkdwn"]
    reply = await _post(_api(ctx), "chat.postMessage", body)
    out = {"ok": True, "channel": reply.get("channel"), "ts": reply.get("ts")}
    if "threadTs" in input:
        out["threadTs"] = input["threadTs"]
    return out


def _message(raw: Any) -> JsonObject:
    """The fields of a Slack message the model needs, in camelCase."""
    item = raw if isinstance(raw, dict) else {}
    out: JsonObject = {
        "ts": item.get("ts"),
        "user": item.get("user") or item.get("bot_id"),
        "text": item.get("text", ""),
    }
    if item.get("thread_ts"):
        out["threadTs"] = item["thread_ts"]
    if item.get("reply_count"):
        out["replyCount"] = item["reply_count"]
    files = [
        {"id": f.get("id"), "name": f.get("name"), "mimetype": f.get("mimetype")}
        for f in item.get("files") or []
        if isinstance(f, dict)
    ]
    if files:
        out["files"] = files
    return out


async def read(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """conversations.history, or conversations.replies when threadTs is given."""
    params: JsonObject = {
        "channel": input["channel"],
        "limit": int(input.get("limit", DEFAULT_READ_LIMIT)),
    }
    for key, wire in (("oldest", "oldest"), ("latest", "latest"), ("cursor", "cursor")):
        if key in input:
            params[wire] = input[key]
    if "threadTs" in input:
        params["ts"] = input["threadTs"]
        reply = await _get(_api(ctx), "conversations.replies", params)
    else:
        reply = await _get(_api(ctx), "conversations.history", params)
    cursor = (reply.get("response_metadata") or {}).get("next_cursor") or None
    return {
        "ok": True,
        "channel": input["channel"],
        "messages": [_message(m) for m in reply.get("messages") or []],
        "hasMore": bool(reply.get("has_more")),
        "nextCursor": cursor,
    }


async def edit(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """chat.update: replace the text of a message the bot posted."""
    body = {"channel": input["channel"], "ts": input["ts"], "text": input["text"]}
    reply = await _post(_api(ctx), "chat.update", body)
    return {"ok": True, "channel": reply.get("channel"), "ts": reply.get("ts")}


async def delete(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """chat.delete."""
    reply = await _post(_api(ctx), "chat.delete", {"channel": input["channel"], "ts": input["ts"]})
    return {"ok": True, "channel": reply.get("channel"), "ts": reply.get("ts")}


async def react(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """reactions.add: `name` is the emoji name, with or without colons (thumbsup, :eyes:)."""
    name = str(input["name"]).strip(":")
    body = {"channel": input["channel"], "timestamp": input["ts"], "name": name}
    await _post(_api(ctx), "reactions.add", body)
    return {"ok": True, "channel": input["channel"], "ts": input["ts"], "name": name}


def _check_file_url(api: _chatapi.Api, config: Mapping[str, Any], raw: str) -> str:
    """The bot token goes only to the API's origin or to https `fileHosts`."""
    try:
        url = httpx.URL(raw)
        base = httpx.URL(api.settings.base_url)
    except httpx.InvalidURL:
        url = base = httpx.URL("invalid:")
    hosts = config.get("fileHosts", list(DEFAULT_FILE_HOSTS))
    same_origin = (url.scheme, url.host, url.port) == (base.scheme, base.host, base.port)
    listed = url.scheme == "https" and isinstance(hosts, list) and url.host in hosts
    if not (same_origin or listed):
        raise ToolFailed(
            f"refusing to send the Slack token to {raw!r}: not a Slack file host",
            code=ErrorCode.E_TOOL_URL_INVALID,
            suggestion="Pass the file's fileId, or a url_private link on files.slack.com.",
        )
    return raw


async def _file_url(api: _chatapi.Api, input: JsonObject) -> tuple[str, str]:
    """(download URL, file name) from fileId (files.info) or from url."""
    if "fileId" in input:
        reply = await _get(api, "files.info", {"file": input["fileId"]})
        info = reply.get("file") or {}
        url = info.get("url_private_download") or info.get("url_private")
        if not isinstance(url, str):
            raise ToolFailed(
                f"slack files.info gave no download URL for {input['fileId']!r}",
                code=ErrorCode.E_TOOL_API,
                suggestion="The file may be external or deleted.",
            )
        return url, str(info.get("name") or "")
    if "url" in input:
        url = str(input["url"])
        return url, url.split("?", 1)[0].rsplit("/", 1)[-1]
    raise ToolFailed("slack downloadFile needs fileId or url", code=ErrorCode.E_TOOL_INVALID_ARGS)


async def download_file(ctx: ToolContext, input: JsonObject) -> JsonObject:
    """Stream a Slack file (by fileId or url_private URL) into the workspace."""
    api = _api(ctx)
    url, name = await _file_url(api, input)
    _check_file_url(api, ctx.config, url)
    workspace = _workspace.Workspace.from_context(ctx.workdir, ctx.config)
    fallback = f"slack-{str(input.get('fileId', 'file'))[:16]}"
    default = f"{api.settings.download_dir}/{_chatapi.safe_name(name, fallback)}"
    target = _chatapi.download_target(input.get("path"), default, workspace)
    written = await _chatapi.download(api, url, target)
    return {"ok": True, "path": workspace.display(target), "bytes": written, "name": target.name}


handlers = {
    "send": send,
    "read": read,
    "edit": edit,
    "delete": delete,
    "react": react,
    "downloadFile": download_file,
}
