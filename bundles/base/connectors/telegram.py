"""The `telegram` connector: Bot API long polling in, the agent's reply out with sendMessage.

Each text message (or photo caption) becomes the connector event `config.event`
("telegram_message") with the text as input and properties
`{chatId, messageId, chatType, chatTitle, from: {id, username, firstName, isBot}, text,
threadId, updateId}`. The recommended ingress rule gives one instance per chat:
`route: {instanceKeyProperty: chatId, instanceKeyPrefix: "telegram:"}` -> `telegram:<chatId>`.
A non-empty reply is sent back to the same chat (as a reply to the message, in chunks of 4096).
With `streamReplies` (default true) the reply is written while the agent works: a draft message
with the first text, edited as more arrives (editMessageText at most once per `editIntervalMs`,
default 1000), a last edit with the whole reply, and "typing…" while a tool runs
(sendChatAction; see `_draft.py`).

The update offset is saved in `<ctx.state_dir>/telegram.json` BEFORE an update is handed to the
agent: after a crash or restart polling resumes after the last update seen, so an update is
never delivered twice (at most once; one being handled when the process died is not retried).

Failures: a missing token, or a token the API refuses at start (getMe answers 401/404), is a
start error (E_CONNECTOR_START_FAILED). While running, every failed poll is logged and retried
with an exponential backoff (`backoffMs` doubling up to `maxBackoffMs`, at least a 429's
retry_after): 409 means another client polls with this token or a webhook is set
(`deleteWebhook: true` removes it at start); 401 means the token was revoked.

The Bot API client is python-telegram-bot's `Bot` over its httpx transport (`apiBaseUrl` is
its base URL); only its typed methods and objects are used, none of its `ext` framework
(Application, handlers, job queue): polling, the offset file, backoff and drafts are ours.
Its errors become `_chatbot.ApiError` (HTTP status, a 429's retry_after, the token masked),
the error type the drafts and the poll loop handle. An update the library cannot read fails
the poll like an unreachable API (logged, retried with backoff).
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime as dt
import math
import warnings
from collections.abc import Awaitable, Mapping
from typing import Any, TypeVar

from telegram import (
    Bot,
    CallbackQuery,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    ReplyParameters,
    Update,
)
from telegram.constants import ChatAction
from telegram.error import RetryAfter, TelegramError
from telegram.request import HTTPXRequest

from bundles.sdk import ConnectorContext, ConnectorReply, load_sibling

chatbot = load_sibling(__file__, "_chatbot")
drafts = load_sibling(__file__, "_draft")
approvals = load_sibling(__file__, "_approvals")
MAX_TEXT = 4096
CALLBACK_PREFIX = "ga:"
UPDATES = ("message", "callback_query")
POLL_SLACK_S = 10
"""How much longer than the long poll's own timeout its HTTP read may take."""
T = TypeVar("T")

_status: contextvars.ContextVar[int] = contextvars.ContextVar("telegram_status", default=0)
"""The HTTP status of the call being made (0: no answer came back)."""


class _Request(HTTPXRequest):
    """python-telegram-bot's httpx transport that notes each answer's HTTP status: its errors
    carry none (a 502 and a dropped connection are both NetworkError), and the logs and the
    poll's hints name it. A call is awaited in its caller's task, so the status is the
    caller's to read."""

    async def do_request(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        code, payload = await super().do_request(*args, **kwargs)
        _status.set(code)
        return code, payload


def _retry_after(exc: RetryAfter) -> int:
    """Whole seconds; the attribute is an int or (opted in, later by default) a timedelta."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the int form is deprecated
        value: Any = exc.retry_after
    seconds = value.total_seconds() if isinstance(value, dt.timedelta) else float(value)
    return math.ceil(seconds)


class Telegram:
    def __init__(self, ctx: ConnectorContext) -> None:
        cfg = ctx.config
        self.ctx = ctx
        self.token = chatbot.bot_token(ctx, "telegram", "TELEGRAM_BOT_TOKEN")
        base = str(cfg.get("apiBaseUrl") or "https://api.telegram.org").rstrip("/")
        self.event = str(cfg.get("event", "telegram_message"))
        self.poll_timeout = int(cfg.get("pollTimeoutSeconds", 25))
        self.limit = int(cfg.get("limit", 100))
        self.reply_timeout = int(cfg.get("replyTimeoutMs", 300_000)) / 1000
        self.reply_to = chatbot.flag(cfg.get("replyToMessage", True))
        self.stream = chatbot.flag(cfg.get("streamReplies", True))
        self.edit_interval = int(cfg.get("editIntervalMs", 1000)) / 1000
        self.backoff = chatbot.Backoff(
            first=int(cfg.get("backoffMs", 1000)) / 1000,
            cap=int(cfg.get("maxBackoffMs", 60_000)) / 1000,
        )
        self.slots = asyncio.Semaphore(int(cfg.get("maxConcurrent", 16)))
        self.state = chatbot.StateFile(ctx, "telegram.json")
        self.offset = int(self.state.load().get("offset", 0))
        timeout = int(cfg.get("timeoutMs", 30_000)) / 1000
        # proxy variables of the environment are ignored (trust_env), as by the chat tools
        self.requests = (
            _Request(read_timeout=timeout, write_timeout=timeout, connect_timeout=timeout,
                     pool_timeout=timeout, httpx_kwargs={"trust_env": False}),
            _Request(connection_pool_size=1, read_timeout=POLL_SLACK_S, write_timeout=timeout,
                     connect_timeout=timeout, pool_timeout=timeout,
                     httpx_kwargs={"trust_env": False}),
        )  # fmt: skip
        self.bot = Bot(self.token, base_url=f"{base}/bot", request=self.requests[0],
                       get_updates_request=self.requests[1])  # fmt: skip
        self.tasks = chatbot.Conversations()
        self.pending = approvals.Pending(ctx)
        self.approvers = approvals.approvers(cfg)

    async def call(self, method: str, call: Awaitable[T]) -> T:
        """The call's result, or `_chatbot.ApiError` with the HTTP status, a 429's retry_after
        and the library's reason (the token masked)."""
        _status.set(0)
        try:
            return await call
        except RetryAfter as exc:
            wait = _retry_after(exc)
            raise chatbot.ApiError(method, _status.get() or 429, self._mask(exc), wait) from None
        except TelegramError as exc:
            raise chatbot.ApiError(method, _status.get(), self._mask(exc)) from None
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            # an answer the library cannot read as the Bot API's objects
            reason = f"unreadable answer ({type(exc).__name__})"
            raise chatbot.ApiError(method, _status.get(), reason) from None

    def _mask(self, exc: TelegramError) -> str:
        return str(exc.message).replace(self.token, "***")

    async def check(self) -> None:
        """getMe: a refused token fails the start; an unreachable API is left to `run`."""
        try:
            me = await self.call("getMe", self.bot.get_me())
        except chatbot.ApiError as exc:
            if exc.status in (401, 403, 404):
                raise RuntimeError(
                    f"telegram refused the bot token: {exc} - check the Connection's "
                    "secrets.botToken and config.apiBaseUrl"
                ) from None
            self.ctx.logger.warning("telegram_unreachable", error=str(exc))
            return
        self.ctx.logger.info("telegram_ready", bot=me.username, offset=self.offset)
        if chatbot.flag(self.ctx.config.get("deleteWebhook", False)):
            await self.call("deleteWebhook", self.bot.delete_webhook())

    async def poll(self) -> tuple[Update, ...]:
        return await self.call("getUpdates", self.bot.get_updates(
            offset=self.offset, timeout=self.poll_timeout, limit=self.limit,
            allowed_updates=UPDATES, read_timeout=POLL_SLACK_S,
        ))  # fmt: skip

    async def serve(self) -> None:
        while True:
            try:
                updates = await self.poll()
            except chatbot.ApiError as exc:
                delay = self.backoff.next(exc.retry_after or 0)
                self.ctx.logger.error(
                    "telegram_poll_failed", status=exc.status, error=str(exc),
                    hint=_hint(exc.status), retry_in=delay,
                )  # fmt: skip
                await asyncio.sleep(delay)
                continue
            self.backoff.reset()
            for update in updates:
                self.accept(update)

    def accept(self, update: Update) -> None:
        if update.update_id < self.offset:
            return  # already seen (a server that ignores the offset)
        self.offset = update.update_id + 1
        self.state.save({"offset": self.offset})  # before handing it on: never twice
        if update.callback_query is not None:
            self.tasks.start(self.on_press(update.callback_query))
            return
        props = message_properties(update)
        if props is None:
            self.ctx.logger.info("telegram_update_skipped", update_id=update.update_id)
            return
        self.tasks.start(self.handle(props))

    async def handle(self, props: dict[str, Any]) -> None:
        async with self.slots:
            draft = drafts.Draft(_Chat(self, props), interval=self.edit_interval,
                                 logger=self.ctx.logger)  # fmt: skip
            text = await chatbot.agent_reply(
                self.ctx, self.event, props, self.reply_timeout,
                kind="telegram", chat_id=props["chatId"],
                idempotency_key=f"update:{props['updateId']}",  # redelivered updates are one
                on_approval=lambda request: self.ask(props, request),
                on_delta=draft.on_delta if self.stream else None,
            )  # fmt: skip
            await draft.finish(text)

    async def answer(self, props: dict[str, Any], text: str) -> None:
        """A reply that comes whole (after an approval): posted, in pieces of MAX_TEXT."""
        chat = _Chat(self, props)
        await drafts.Draft(chat, interval=self.edit_interval, logger=self.ctx.logger).finish(text)

    # -- approvals (ARCHITECTURE.md §10): inline buttons in the chat the turn came from ------

    async def ask(self, props: dict[str, Any], request: Mapping[str, Any]) -> None:
        where = {"messageId": props["messageId"], "threadId": props.get("threadId"),
                 "chatId": props["chatId"]}  # fmt: skip
        token = self.pending.add(str(request.get("id")), str(props["chatId"]), **where)
        keyboard = InlineKeyboardMarkup([[
            InlineKeyboardButton("Approve", callback_data=f"{CALLBACK_PREFIX}{token}:y"),
            InlineKeyboardButton("Deny", callback_data=f"{CALLBACK_PREFIX}{token}:n"),
        ]])  # fmt: skip
        text = approvals.prompt_text(request)[:MAX_TEXT]
        try:
            await self.call("sendMessage", self.bot.send_message(
                props["chatId"], text, reply_markup=keyboard))  # fmt: skip
        except chatbot.ApiError as exc:
            self.ctx.logger.error("telegram_approval_not_sent", chat_id=props["chatId"],
                                  error=str(exc))  # fmt: skip

    async def on_press(self, query: CallbackQuery) -> None:
        """A button press: only from the chat of the request (and an approver, if listed)."""
        data = str(query.data or "")
        if not data.startswith(CALLBACK_PREFIX):
            return
        token, _, choice = data.removeprefix(CALLBACK_PREFIX).partition(":")
        record = self.pending.get(token)
        message = query.message
        chat_id = message.chat.id if message is not None else None
        user = query.from_user
        who = [str(user.id), str(user.username or "")]
        why = approvals.refusal(record, str(chat_id), who, self.approvers)
        await self._ack(query, why)
        if why is not None or record is None:
            self.ctx.logger.warning("telegram_approval_refused", user=who[0], reason=why)
            return
        self.pending.drop(token)
        approved, by = choice == "y", f"telegram:{who[1] or who[0]}"
        if message is not None:
            await self._settle(message.chat.id, message.message_id, approved, by)
        approver = approvals.principal(who, self.approvers) or ""  # what the daemon records
        text = await approvals.decide(self.ctx, record["callId"], approved, approver,
                                      self.reply_timeout)  # fmt: skip
        if text is not None:
            props = {"chatId": chat_id, "messageId": record.get("messageId"),
                     "threadId": record.get("threadId")}  # fmt: skip
            await self.answer(props, text)

    async def on_resumed(self, reply: ConnectorReply) -> None:
        """The reply of a turn whose approval was decided elsewhere: to its chat."""
        await approvals.on_resumed(
            self.ctx, self.pending, reply,
            lambda r: {key: r.get(key) for key in ("chatId", "messageId", "threadId")},
            self.ask, self.answer,
        )  # fmt: skip

    async def _ack(self, query: CallbackQuery, refused: str | None) -> None:
        alert = True if refused is not None else None
        try:
            await self.call("answerCallbackQuery", self.bot.answer_callback_query(
                query.id, text=refused, show_alert=alert))  # fmt: skip
        except chatbot.ApiError as exc:
            self.ctx.logger.warning("telegram_callback_answer_failed", error=str(exc))

    async def _settle(self, chat_id: int, message_id: int, approved: bool, by: str) -> None:
        """The buttons go: the message says who decided what."""
        text = approvals.decision_text(approved, by)
        try:
            await self.call("editMessageText", self.bot.edit_message_text(
                text, chat_id=chat_id, message_id=message_id))  # fmt: skip
        except chatbot.ApiError as exc:
            self.ctx.logger.warning("telegram_approval_edit_failed", error=str(exc))

    async def aclose(self) -> None:
        self.tasks.cancel()
        await asyncio.gather(*(request.shutdown() for request in self.requests))


class _Chat:
    """One Telegram chat as a draft's `Chat`: the reply's messages and the typing action."""

    max_text = MAX_TEXT

    def __init__(self, bot: Telegram, props: dict[str, Any]) -> None:
        self.bot = bot
        self.props = props
        self.chat_id = props["chatId"]
        self.thread_id = props.get("threadId")

    async def post(self, text: str) -> Any:
        reply = None
        if self.bot.reply_to:
            reply = ReplyParameters(self.props["messageId"], allow_sending_without_reply=True)
        sending = self.bot.bot.send_message(
            self.chat_id, text, reply_parameters=reply, message_thread_id=self.thread_id
        )
        sent = await self.bot.call("sendMessage", sending)
        return sent.message_id

    async def edit(self, handle: Any, text: str) -> None:
        await self.bot.call("editMessageText", self.bot.bot.edit_message_text(
            text, chat_id=self.chat_id, message_id=handle))  # fmt: skip

    async def typing(self) -> None:
        await self.bot.call("sendChatAction", self.bot.bot.send_chat_action(
            self.chat_id, ChatAction.TYPING, message_thread_id=self.thread_id))  # fmt: skip


def _hint(status: int) -> str:
    return {
        401: "the bot token was refused: fix secrets.botToken",
        409: "another client polls with this token, or a webhook is set (deleteWebhook: true)",
        429: "rate limited: waiting as asked",
    }.get(status, "the API or the network failed: retrying")


def message_properties(update: Update) -> dict[str, Any] | None:
    """The event properties of a text message update; None for anything else."""
    msg = update.message
    if msg is None:
        return None
    text = msg.text if msg.text is not None else msg.caption
    if not text or not text.strip():
        return None
    sender = msg.from_user
    return {
        "chatId": msg.chat.id,
        "chatType": str(msg.chat.type),
        "chatTitle": msg.chat.title,
        "messageId": msg.message_id,
        "threadId": msg.message_thread_id,
        "from": {"id": sender.id if sender else None,
                 "username": sender.username if sender else None,
                 "firstName": sender.first_name if sender else None,
                 "isBot": sender.is_bot if sender else False},
        "text": text,
        "updateId": update.update_id,
    }  # fmt: skip


async def start(ctx: ConnectorContext) -> None:
    bot = Telegram(ctx)
    ctx.state["telegram"] = bot
    await bot.check()


async def run(ctx: ConnectorContext) -> None:
    bot: Telegram = ctx.state["telegram"]
    ctx.on_resumed(bot.on_resumed)
    try:
        await bot.serve()
    finally:
        await bot.aclose()
