"""The `telegram` connector: Bot API long polling in, the agent's reply out with sendMessage.

Each text message (or photo caption) becomes the connector event `config.event`
("telegram_message") with the text as input and properties
`{chatId, messageId, chatType, chatTitle, from: {id, username, firstName, isBot}, text,
threadId, updateId}`. The recommended ingress rule gives one instance per chat:
`route: {instanceKeyProperty: chatId, instanceKeyPrefix: "telegram:"}` -> `telegram:<chatId>`.
A non-empty reply is sent back to the same chat (`reply_to_message_id`, in chunks of 4096).
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
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import httpx

from bundles.sdk import ConnectorContext, ConnectorReply, load_sibling

chatbot = load_sibling(__file__, "_chatbot")
drafts = load_sibling(__file__, "_draft")
approvals = load_sibling(__file__, "_approvals")
MAX_TEXT = 4096
CALLBACK_PREFIX = "ga:"


class Telegram:
    def __init__(self, ctx: ConnectorContext) -> None:
        cfg = ctx.config
        self.ctx = ctx
        self.token = chatbot.bot_token(ctx, "telegram", "TELEGRAM_BOT_TOKEN")
        base = str(cfg.get("apiBaseUrl") or "https://api.telegram.org").rstrip("/")
        self.base = f"{base}/bot{self.token}"
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
        self.client = httpx.AsyncClient(
            timeout=int(cfg.get("timeoutMs", 30_000)) / 1000, trust_env=False
        )
        self.tasks = chatbot.Conversations()
        self.pending = approvals.Pending(ctx)
        self.approvers = approvals.approvers(cfg)

    async def call(self, method: str, body: dict[str, Any], wait_s: float | None = None) -> Any:
        answer = await chatbot.call_json(
            self.client, f"{self.base}/{method}", method, body, secret=self.token,
            http_timeout=wait_s,
        )  # fmt: skip
        return answer.get("result")

    async def check(self) -> None:
        """getMe: a refused token fails the start; an unreachable API is left to `run`."""
        try:
            me = await self.call("getMe", {})
        except chatbot.ApiError as exc:
            if exc.status in (401, 403, 404):
                raise RuntimeError(
                    f"telegram refused the bot token: {exc} - check the Connection's "
                    "secrets.botToken and config.apiBaseUrl"
                ) from None
            self.ctx.logger.warning("telegram_unreachable", error=str(exc))
            return
        username = me.get("username") if isinstance(me, dict) else None
        self.ctx.logger.info("telegram_ready", bot=username, offset=self.offset)
        if chatbot.flag(self.ctx.config.get("deleteWebhook", False)):
            await self.call("deleteWebhook", {})

    async def poll(self) -> list[Any]:
        body = {"offset": self.offset, "timeout": self.poll_timeout, "limit": self.limit,
                "allowed_updates": ["message", "callback_query"]}  # fmt: skip
        result = await self.call("getUpdates", body, wait_s=self.poll_timeout + 10)
        return result if isinstance(result, list) else []

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

    def accept(self, update: Any) -> None:
        if not isinstance(update, dict) or not isinstance(update.get("update_id"), int):
            return
        if update["update_id"] < self.offset:
            return  # already seen (a server that ignores the offset)
        self.offset = update["update_id"] + 1
        self.state.save({"offset": self.offset})  # before handing it on: never twice
        if isinstance(update.get("callback_query"), dict):
            self.tasks.start(self.on_press(update["callback_query"]))
            return
        props = message_properties(update)
        if props is None:
            self.ctx.logger.info("telegram_update_skipped", update_id=update["update_id"])
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
        keyboard = [[{"text": "Approve", "callback_data": f"{CALLBACK_PREFIX}{token}:y"},
                     {"text": "Deny", "callback_data": f"{CALLBACK_PREFIX}{token}:n"}]]  # fmt: skip
        body: dict[str, Any] = {"chat_id": props["chatId"],
                                "text": approvals.prompt_text(request)[:MAX_TEXT],
                                "reply_markup": {"inline_keyboard": keyboard}}  # fmt: skip
        try:
            await self.call("sendMessage", body)
        except chatbot.ApiError as exc:
            self.ctx.logger.error("telegram_approval_not_sent", chat_id=props["chatId"],
                                  error=str(exc))  # fmt: skip

    async def on_press(self, query: dict[str, Any]) -> None:
        """A button press: only from the chat of the request (and an approver, if listed)."""
        data = str(query.get("data", ""))
        if not data.startswith(CALLBACK_PREFIX):
            return
        token, _, choice = data.removeprefix(CALLBACK_PREFIX).partition(":")
        record = self.pending.get(token)
        message = approvals.obj(query.get("message"))
        chat, user = approvals.obj(message.get("chat")), approvals.obj(query.get("from"))
        who = [str(user.get("id", "")), str(user.get("username", ""))]
        why = approvals.refusal(record, str(chat.get("id")), who, self.approvers)
        await self._ack(query, why)
        if why is not None or record is None:
            self.ctx.logger.warning("telegram_approval_refused", user=who[0], reason=why)
            return
        self.pending.drop(token)
        approved, by = choice == "y", f"telegram:{who[1] or who[0]}"
        await self._settle(chat.get("id"), message.get("message_id"), approved, by)
        approver = approvals.principal(who, self.approvers) or ""  # what the daemon records
        text = await approvals.decide(self.ctx, record["callId"], approved, approver,
                                      self.reply_timeout)  # fmt: skip
        if text is not None:
            props = {"chatId": chat.get("id"), "messageId": record.get("messageId"),
                     "threadId": record.get("threadId")}  # fmt: skip
            await self.answer(props, text)

    async def on_resumed(self, reply: ConnectorReply) -> None:
        """The reply of a turn whose approval was decided elsewhere: to its chat."""
        await approvals.on_resumed(
            self.ctx, self.pending, reply,
            lambda r: {key: r.get(key) for key in ("chatId", "messageId", "threadId")},
            self.ask, self.answer,
        )  # fmt: skip

    async def _ack(self, query: dict[str, Any], refused: str | None) -> None:
        body: dict[str, Any] = {"callback_query_id": query.get("id")}
        if refused is not None:
            body.update(text=refused, show_alert=True)
        try:
            await self.call("answerCallbackQuery", body)
        except chatbot.ApiError as exc:
            self.ctx.logger.warning("telegram_callback_answer_failed", error=str(exc))

    async def _settle(self, chat_id: Any, message_id: Any, approved: bool, by: str) -> None:
        """The buttons go: the message says who decided what."""
        body = {"chat_id": chat_id, "message_id": message_id,
                "text": approvals.decision_text(approved, by)}  # fmt: skip
        try:
            await self.call("editMessageText", body)
        except chatbot.ApiError as exc:
            self.ctx.logger.warning("telegram_approval_edit_failed", error=str(exc))

    async def aclose(self) -> None:
        self.tasks.cancel()
        await self.client.aclose()


class _Chat:
    """One Telegram chat as a draft's `Chat`: the reply's messages and the typing action."""

    max_text = MAX_TEXT

    def __init__(self, bot: Telegram, props: dict[str, Any]) -> None:
        self.bot = bot
        self.props = props
        self.chat_id = props["chatId"]

    async def post(self, text: str) -> Any:
        body: dict[str, Any] = {"chat_id": self.chat_id, "text": text}
        if self.bot.reply_to:
            body["reply_to_message_id"] = self.props["messageId"]
            body["allow_sending_without_reply"] = True
        if self.props.get("threadId") is not None:
            body["message_thread_id"] = self.props["threadId"]
        sent = await self.bot.call("sendMessage", body)
        return sent.get("message_id") if isinstance(sent, dict) else None

    async def edit(self, handle: Any, text: str) -> None:
        await self.bot.call("editMessageText", {"chat_id": self.chat_id, "message_id": handle,
                                                "text": text})  # fmt: skip

    async def typing(self) -> None:
        body: dict[str, Any] = {"chat_id": self.chat_id, "action": "typing"}
        if self.props.get("threadId") is not None:
            body["message_thread_id"] = self.props["threadId"]
        await self.bot.call("sendChatAction", body)


def _hint(status: int) -> str:
    return {
        401: "the bot token was refused: fix secrets.botToken",
        409: "another client polls with this token, or a webhook is set (deleteWebhook: true)",
        429: "rate limited: waiting as asked",
    }.get(status, "the API or the network failed: retrying")


def message_properties(update: dict[str, Any]) -> dict[str, Any] | None:
    """The event properties of a text message update; None for anything else."""
    msg = update.get("message")
    if not isinstance(msg, dict) or not isinstance(msg.get("chat"), dict):
        return None
    text = msg.get("text", msg.get("caption"))
    if not isinstance(text, str) or not text.strip():
        return None
    chat, sender = msg["chat"], msg.get("from")
    sender = sender if isinstance(sender, dict) else {}
    return {
        "chatId": chat.get("id"),
        "chatType": chat.get("type"),
        "chatTitle": chat.get("title"),
        "messageId": msg.get("message_id"),
        "threadId": msg.get("message_thread_id"),
        "from": {"id": sender.get("id"), "username": sender.get("username"),
                 "firstName": sender.get("first_name"), "isBot": sender.get("is_bot", False)},
        "text": text,
        "updateId": update["update_id"],
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
