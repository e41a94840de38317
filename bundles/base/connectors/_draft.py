"""A chat reply written while the agent works (the `telegram` and `slack` connectors).

The first text of the turn is posted as a draft message, which is edited in place as more
arrives and a last time with the whole reply. Chat APIs limit how often a message may change
(Telegram: about one edit a second per chat; Slack's chat.update: about fifty a minute), so at
most one post or edit goes out per `interval`, always with all the text so far: what arrives in
between is merged into the next one, and the final edit waits its turn too. A refused call
that says when to retry (429) pushes the next one back. While a tool runs the chat shows it:
the API's typing indicator, renewed every `typing_every` seconds (Telegram), or where there is
none (Slack) a status line under the draft.

A turn that streams nothing (a model that does not stream, a connector set not to ask) gets no
draft: `finish` posts the reply as before, in pieces of the chat's `max_text`.

Loaded by path with `bundles.sdk.load_sibling` (bundles/base is not a Python package).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from bundles.sdk import DeltaKind, Logger, StreamDelta, load_sibling

chatbot = load_sibling(__file__, "_chatbot")
TYPING_EVERY = 4.0
"""Telegram shows "typing" for 5 s after each sendChatAction."""


class Chat(Protocol):
    """One conversation's message API. `post` returns the handle `edit` takes (a message id,
    a ts); both raise `_chatbot.ApiError`."""

    max_text: int
    typing: Callable[[], Awaitable[None]] | None
    """Show "typing…" (None: the chat has no such indicator: a status line is shown)."""

    async def post(self, text: str) -> Any: ...
    async def edit(self, handle: Any, text: str) -> None: ...


class Draft:
    def __init__(
        self,
        chat: Chat,
        *,
        interval: float,
        logger: Logger,
        typing_every: float = TYPING_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.chat = chat
        self.interval = interval
        self.logger = logger
        self.typing_every = typing_every
        self.clock = clock
        self.step: int | None = None
        self.parts: list[str] = []
        """The text of the latest step that wrote some."""
        self.tool: str | None = None
        """The tool running now."""
        self.handle: Any = None
        self.shown: str | None = None
        self.calls = 0
        """Posts and edits made (for the logs and the tests)."""
        self._next_at = 0.0
        self._changed = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._posting: asyncio.Future[Any] | None = None
        self._posting_text = ""

    def on_delta(self, delta: StreamDelta) -> None:
        """`ctx.emit(..., on_delta=draft.on_delta)`: note the change, wake the writer."""
        if delta.kind is DeltaKind.TEXT:
            if delta.step != self.step:  # a new step's text replaces the last one's
                self.step, self.parts = delta.step, []
            self.parts.append(delta.text)
        else:
            self.tool = (delta.tool or "a tool") if delta.kind is DeltaKind.TOOL_STARTED else None
        self._changed.set()
        if self._writer is None:
            self._writer = asyncio.ensure_future(self._write())

    async def finish(self, text: str | None) -> None:
        """The turn is over: the draft shows the whole reply (`text`; None: there is none to
        show), the part beyond `max_text` in new messages."""
        await self._stop()
        if text is None:
            if self.handle is not None and self.tool is not None and self.chat.typing is None:
                self.tool = None  # no status line left behind
                await self._show(self._view())
            return
        pieces = chatbot.chunks(text, self.chat.max_text)
        if not pieces:
            return
        first, *rest = pieces
        if (self.handle is None or first != self.shown) and not await self._show(first):
            return
        for piece in rest:
            if not await self._show(piece, new=True):
                return

    def _view(self) -> str:
        text = "".join(self.parts)[: self.chat.max_text - 40]
        if self.tool is None or self.chat.typing is not None:
            return text
        status = f"_{self.tool}…_"
        return f"{text}\n\n{status}" if text else status

    async def _write(self) -> None:
        while True:
            typing = self.chat.typing if self.tool is not None else None
            if typing is not None:
                await self._call(typing())
            try:
                async with asyncio.timeout(self.typing_every if typing else None):
                    await self._changed.wait()
            except TimeoutError:
                continue  # the tool still runs: show "typing" again
            self._changed.clear()
            view = self._view()
            if view.strip() and view != self.shown:
                await self._pace()
                await self._show(self._view())  # with what came in while it waited

    async def _show(self, text: str, *, new: bool = False) -> bool:
        """Post (the first time, or `new`) or edit, once the interval since the last allows;
        False when the API refused."""
        await self._pace()
        if text == self.shown and not new:
            return True
        self._next_at = self.clock() + self.interval
        self.calls += 1
        if self.handle is None or new:
            self._posting, self._posting_text = asyncio.ensure_future(self.chat.post(text)), text
            # shielded: a post cut by `finish` still yields its handle (no second message)
            posted = await self._call(asyncio.shield(self._posting))
            if posted is None:
                return False
            self.handle = self.handle if new else posted
        elif await self._call(self.chat.edit(self.handle, text), edit=True) is None:
            return False
        self.shown = text
        return True

    async def _pace(self) -> None:
        wait = self._next_at - self.clock()
        if wait > 0:
            await asyncio.sleep(wait)  # the API's rate limit: a deadline, not a poll

    async def _call(self, call: Awaitable[Any], *, edit: bool = False) -> Any:
        """The call's result (True for an edit), or None when the API refused it."""
        try:
            result = await call
        except chatbot.ApiError as exc:
            if exc.retry_after:
                self._next_at = self.clock() + exc.retry_after
            self.logger.warning("chat_reply_failed", method=exc.method, status=exc.status,
                                error=str(exc))  # fmt: skip
            return None
        return True if edit else result

    async def _stop(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
        if self._posting is not None and self.handle is None:
            with contextlib.suppress(chatbot.ApiError):
                self.handle = await self._posting
                self.shown = self._posting_text
