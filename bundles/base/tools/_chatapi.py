"""What the `telegram` and `slack` tools share: token lookup, one API call with coded errors and
rate-limit handling, and a size-capped download confined to the workspace.

Loaded by path with `_load_sibling` (bundles/base is not a Python package). The token never
appears in a result or an error message: every text that leaves this module goes through
`Api.redact`, because Telegram puts the token in the URL and httpx errors quote the URL.

Settings shared by both tools (`Tool.spec.config`):
- `token` (a string, or `{value: ...}` / `{valueFrom: {env: NAME}}` / `{valueFrom: {secretRef:
  ...}}`), else `tokenEnv` (the name of an environment variable, default `TELEGRAM_BOT_TOKEN` /
  `SLACK_BOT_TOKEN`). The agent reads both once, when it loads the tool, and hands the handlers
  `token` as a string; the variable is then gone from its environment (a secret);
- `apiBaseUrl` (default the real API), `timeoutMs` (default 30000), `proxy` (an HTTP proxy
  URL; proxy variables from the environment are ignored);
- `maxRetries` (default 1) and `maxRetryAfterSeconds` (default 5): a 429 whose retry-after
  fits is waited out and retried, otherwise it is `E_TOOL_RATE_LIMITED` at once;
- `maxDownloadBytes` (default 20000000) and `downloadDir` (default `downloads`).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bundles.sdk import JsonObject, ToolFailed
from protocol.errors import ErrorCode

DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_MAX_DOWNLOAD = 20_000_000


def _int_setting(config: Mapping[str, Any], key: str, default: int) -> int:
    value = config.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ToolFailed(f"Tool config {key!r} must be a non-negative integer, got {value!r}")
    return value


def resolve_token(config: Mapping[str, Any], *, tool: str, default_env: str) -> str:
    """The token from `token`/`botToken` (string or ValueSource shape) or from `tokenEnv`."""
    raw = config.get("token", config.get("botToken"))
    if isinstance(raw, Mapping):
        source = raw.get("valueFrom") or {}
        raw = raw.get("value") if "value" in raw else os.environ.get(str(source.get("env", "")))
    elif raw is None:
        env = str(config.get("tokenEnv", default_env))
        raw = os.environ.get(env)
        if not raw:
            raise ToolFailed(
                f"the {tool} tool has no token: environment variable {env} is not set",
                code=ErrorCode.E_TOOL,
                suggestion=f"Export {env}, or set the Tool's config token or tokenEnv.",
            )
    if not isinstance(raw, str) or not raw.strip():
        raise ToolFailed(
            f"the {tool} tool's config token is empty or not a string",
            code=ErrorCode.E_TOOL,
            suggestion="Set config token to a string, {value: ...} or {valueFrom: {env: NAME}}.",
        )
    return raw.strip()


@dataclass(frozen=True, slots=True)
class Settings:
    tool: str
    token: str
    base_url: str
    timeout_s: float
    proxy: str | None
    max_retries: int
    max_retry_after: int
    max_download: int
    download_dir: str

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any], *, tool: str, default_env: str, default_base: str
    ) -> Settings:
        proxy = config.get("proxy")
        return cls(
            tool=tool,
            token=resolve_token(config, tool=tool, default_env=default_env),
            base_url=str(config.get("apiBaseUrl") or default_base).rstrip("/"),
            timeout_s=_int_setting(config, "timeoutMs", DEFAULT_TIMEOUT_MS) / 1000,
            proxy=str(proxy) if proxy else None,
            max_retries=_int_setting(config, "maxRetries", 1),
            max_retry_after=_int_setting(config, "maxRetryAfterSeconds", 5),
            max_download=_int_setting(config, "maxDownloadBytes", DEFAULT_MAX_DOWNLOAD),
            download_dir=str(config.get("downloadDir", "downloads")),
        )


def retry_after(response: httpx.Response, payload: Any) -> int | None:
    """The seconds a rate-limited answer asks to wait: Telegram's `parameters.retry_after`,
    else the Retry-After header (Slack); None when neither says."""
    params = payload.get("parameters") if isinstance(payload, dict) else None
    if isinstance(params, dict) and isinstance(params.get("retry_after"), int):
        return int(params["retry_after"])
    header = response.headers.get("retry-after", "")
    return int(header) if header.isdigit() else None


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


class Api:
    """One configured API: `call` sends a request and returns the decoded JSON object.

    Both APIs answer `{ok: false, ...}` on failure; the reason is Telegram's `description` or
    Slack's `error`.
    """

    def __init__(self, settings: Settings, headers: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        self.headers = dict(headers or {})

    def redact(self, text: str) -> str:
        return text.replace(self.settings.token, "***")

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            timeout=self.settings.timeout_s,
            trust_env=False,
            proxy=self.settings.proxy,
            headers=self.headers,
        )

    async def call(
        self,
        method: str,
        url: str,
        name: str,
        *,
        json: JsonObject | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> JsonObject:
        """Send; wait out a short 429 (at most `maxRetries` times); raise coded ToolFailed."""
        attempt = 0
        while True:
            response = await self._send(method, url, name, json=json, params=params)
            payload = _json(response)
            if response.status_code != 429:
                return self._checked(response, payload, name)
            wait_s = retry_after(response, payload)
            if (
                wait_s is None
                or wait_s > self.settings.max_retry_after
                or attempt >= self.settings.max_retries
            ):
                raise self._rate_limited(name, wait_s)
            attempt += 1
            await asyncio.sleep(wait_s)  # the server named the delay: waiting is the protocol

    async def _send(
        self,
        method: str,
        url: str,
        name: str,
        *,
        json: JsonObject | None,
        params: Mapping[str, Any] | None,
    ) -> httpx.Response:
        try:
            async with self.client() as client:
                return await client.request(method, url, json=json, params=params)
        except httpx.TimeoutException:
            raise ToolFailed(
                f"{self.settings.tool} {name} took longer than "
                f"{self.settings.timeout_s * 1000:.0f} ms",
                code=ErrorCode.E_TOOL_TIMEOUT,
                suggestion="Retry later, or raise the Tool's config timeoutMs.",
            ) from None
        except httpx.HTTPError as error:
            raise ToolFailed(
                self.redact(f"{self.settings.tool} {name} failed: {type(error).__name__}: {error}"),
                code=ErrorCode.E_TOOL_HTTP,
                suggestion="Check the network and the Tool's config apiBaseUrl.",
            ) from None

    def _rate_limited(self, name: str, wait_s: int | None) -> ToolFailed:
        after = f"retry after {wait_s} s" if wait_s is not None else "no retry-after given"
        return ToolFailed(
            f"{self.settings.tool} {name} was rate limited (HTTP 429, {after})",
            code=ErrorCode.E_TOOL_RATE_LIMITED,
            suggestion=f"Wait {wait_s if wait_s is not None else 'a few'} seconds "
            "(e.g. with wait__wait), then retry once.",
        )

    def _checked(self, response: httpx.Response, payload: Any, name: str) -> JsonObject:
        if isinstance(payload, dict) and payload.get("ok") is False:
            raise self.api_error(name, payload, response.status_code)
        if response.status_code >= 400 or not isinstance(payload, dict):
            body = self.redact(response.text[:300])
            raise ToolFailed(
                f"{self.settings.tool} {name} answered HTTP {response.status_code}: {body}",
                code=ErrorCode.E_TOOL_HTTP,
                suggestion="Check the Tool's config apiBaseUrl; retry later on a 5xx.",
            )
        return payload

    def api_error(self, name: str, payload: JsonObject, status: int) -> ToolFailed:
        reason = payload.get("description") or payload.get("error") or "unknown error"
        auth = status in (401, 403) or reason in ("invalid_auth", "not_authed", "token_revoked")
        return ToolFailed(
            self.redact(f"{self.settings.tool} {name} failed: {reason} (HTTP {status})"),
            code=ErrorCode.E_TOOL_API,
            suggestion="Check the bot token and its permissions."
            if auth
            else "Check the ids and arguments (the bot must be a member of the chat/channel).",
        )


def download_target(raw: str | None, default: str, workspace: Any) -> Path:
    """Where a download goes, inside the workspace. An explicit `raw` path that exists is
    refused; the default path gets a numbered name (`a-1.png`) instead of overwriting."""
    if raw:
        target: Path = workspace.resolve(raw)
        if target.exists():
            raise ToolFailed(
                f"{raw!r} already exists in the workspace",
                code=ErrorCode.E_TOOL_PATH_EXISTS,
                suggestion="Pass another path, or delete the file first.",
            )
        return target
    target = workspace.resolve(default)
    stem, suffix = target.stem, target.suffix
    n = 0
    while target.exists():
        n += 1
        target = target.with_name(f"{stem}-{n}{suffix}")
    return target


def safe_name(name: str, fallback: str) -> str:
    """A file name taken from the API (never a path): the last component, no dot files."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1].strip()
    return base if base and base not in (".", "..") and not base.startswith(".") else fallback


async def download(
    api: Api,
    url: str,
    target: Path,
    *,
    headers: Mapping[str, str] | None = None,
) -> int:
    """Stream `url` into `target` (atomically), refusing more than `maxDownloadBytes`."""
    limit = api.settings.max_download
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".download-")
    size = 0
    try:
        with os.fdopen(fd, "wb") as out:
            async with api.client() as client:
                size = await _stream(api, client, url, headers, out, limit)
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise
    return size


async def _stream(
    api: Api,
    client: httpx.AsyncClient,
    url: str,
    headers: Mapping[str, str] | None,
    out: Any,
    limit: int,
) -> int:
    size = 0
    try:
        async with client.stream("GET", url, headers=headers, follow_redirects=True) as response:
            if response.status_code >= 400:
                raise ToolFailed(
                    f"{api.settings.tool} file download answered HTTP {response.status_code}",
                    code=ErrorCode.E_TOOL_HTTP,
                    suggestion="The file may be gone or the token may lack the files scope.",
                )
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > limit:
                    raise ToolFailed(
                        f"the file is larger than maxDownloadBytes={limit}",
                        code=ErrorCode.E_TOOL_FILE_TOO_LARGE,
                        suggestion="Raise the Tool's config maxDownloadBytes if this is expected.",
                    )
                out.write(chunk)
    except httpx.HTTPError as error:
        raise ToolFailed(
            api.redact(
                f"{api.settings.tool} file download failed: {type(error).__name__}: {error}"
            ),
            code=ErrorCode.E_TOOL_HTTP,
        ) from None
    return size
