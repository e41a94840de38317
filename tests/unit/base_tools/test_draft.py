"""The chat connectors' draft reply (`bundles/base/connectors/_draft.py`) against a recording
chat: posted with the first text, edited at most once per interval with all the text so far,
a last edit with the whole reply, typing or a status line while a tool runs, the API's
retry-after honoured, and a post cut by the end of the turn never made twice."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from protocol.stream import DeltaKind, StreamDelta

from .conftest import load_tool

drafts = load_tool("connectors/_draft.py")
chatbot = drafts.chatbot
INTERVAL = 0.15


@dataclass
class Recording:
    """A chat whose calls are (time, method, handle, text); `hold` delays every post."""

    max_text: int = 100
    with_typing: bool = True
    calls: list[tuple[float, str, Any, str]] = field(default_factory=list)
    refuse_next: chatbot.ApiError | None = None
    hold: asyncio.Event | None = None
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def until(self, check: Callable[[], bool]) -> None:
        async with self.changed:
            await self.changed.wait_for(check)

    async def _record(self, method: str, handle: Any = None, text: str = "") -> None:
        async with self.changed:
            self.calls.append((time.monotonic(), method, handle, text))
            self.changed.notify_all()

    @property
    def typing(self) -> Callable[[], Awaitable[None]] | None:
        return self._typing if self.with_typing else None

    async def _typing(self) -> None:
        await self._record("typing")

    async def post(self, text: str) -> Any:
        if self.hold is not None:
            await self._record("post-started")
            await self.hold.wait()
        await self._maybe_refuse("post")
        await self._record("post", None, text)
        return f"m{len(self.calls)}"

    async def edit(self, handle: Any, text: str) -> None:
        await self._maybe_refuse("edit")
        await self._record("edit", handle, text)

    async def _maybe_refuse(self, method: str) -> None:
        refusal, self.refuse_next = self.refuse_next, None
        if refusal is not None:
            await self._record(f"{method}-refused")
            raise refusal

    def writes(self) -> list[tuple[float, str, Any, str]]:
        return [c for c in self.calls if c[1] in ("post", "edit")]


def draft(chat: Recording, **kw: Any) -> Any:
    return drafts.Draft(chat, interval=INTERVAL, logger=structlog.get_logger(), **kw)


def text(seq: int, chars: str, step: int = 1) -> StreamDelta:
    return StreamDelta(correlation_id="c", seq=seq, kind=DeltaKind.TEXT, step=step, text=chars)


def tool(seq: int, kind: DeltaKind, step: int = 1) -> StreamDelta:
    return StreamDelta(correlation_id="c", seq=seq, kind=kind, step=step, tool="calc__add",
                       status="ok" if kind is DeltaKind.TOOL_FINISHED else None)  # fmt: skip


async def test_a_draft_is_edited_at_most_once_per_interval_and_ends_with_the_reply() -> None:
    chat = Recording()
    d = draft(chat)
    async with asyncio.timeout(10):
        started = time.monotonic()
        for i in range(20):
            d.on_delta(text(i, f"{i} "))
            await asyncio.sleep(0.03)  # a model writing: 0.6 s of text, about four intervals
        await d.finish("".join(f"{i} " for i in range(20)) + "end")
        took = time.monotonic() - started
    writes = chat.writes()
    assert writes[0][1] == "post" and writes[0][3].startswith("0 ")
    assert {w[1] for w in writes[1:]} == {"edit"} and {w[2] for w in writes[1:]} == {"m1"}
    assert writes[-1][3].endswith("19 end")
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(writes)]
    assert min(gaps) >= INTERVAL * 0.95, gaps
    assert len(writes) <= took / INTERVAL + 1  # merged, not one call per delta
    shown = [w[3] for w in writes]
    assert all(b.startswith(a) for a, b in itertools.pairwise(shown))


async def test_without_deltas_the_reply_is_posted_in_pieces_as_before() -> None:
    chat = Recording(max_text=10)
    async with asyncio.timeout(10):
        await draft(chat).finish("aaaaaaaaaa\nbbbbbbbbbb\ncc")
        await draft(chat).finish(None)  # nothing to show: nothing is sent
    assert [(w[1], w[3]) for w in chat.writes()] == [
        ("post", "aaaaaaaaaa"), ("post", "bbbbbbbbbb"), ("post", "cc"),
    ]  # fmt: skip


async def test_a_running_tool_shows_typing_renewed_until_it_ends() -> None:
    chat = Recording()
    d = draft(chat, typing_every=0.05)
    async with asyncio.timeout(10):
        d.on_delta(tool(0, DeltaKind.TOOL_STARTED))
        await chat.until(lambda: len(chat.calls) >= 3)
        d.on_delta(tool(1, DeltaKind.TOOL_FINISHED))
        d.on_delta(text(2, "five", step=2))
        await d.finish("five")
    methods = [c[1] for c in chat.calls]
    assert methods[:3] == ["typing"] * 3 and methods[-1] == "post"
    assert chat.writes() == [chat.calls[-1]] and chat.calls[-1][3] == "five"


async def test_without_typing_a_status_line_names_the_tool_and_goes_away() -> None:
    chat = Recording(with_typing=False)
    d = draft(chat)
    async with asyncio.timeout(10):
        d.on_delta(text(0, "let me add"))
        d.on_delta(tool(1, DeltaKind.TOOL_STARTED))
        await chat.until(lambda: any("calc__add" in w[3] for w in chat.writes()))
        await d.finish(None)  # the turn failed: the draft keeps its text, not the status
    shown = [w[3] for w in chat.writes()]
    assert shown[-2] == "let me add\n\n_calc__add…_" and shown[-1] == "let me add"


async def test_a_refusal_with_retry_after_pushes_the_next_edit_back() -> None:
    chat = Recording()
    d = draft(chat)
    async with asyncio.timeout(10):
        d.on_delta(text(0, "a"))
        await chat.until(lambda: len(chat.writes()) == 1)
        chat.refuse_next = chatbot.ApiError("editMessageText", 429, "Too Many Requests", 1)
        d.on_delta(text(1, "b"))
        await chat.until(lambda: any(c[1] == "edit-refused" for c in chat.calls))
        refused_at = chat.calls[-1][0]
        await d.finish("abc")
    final = chat.writes()[-1]
    assert final[1:] == ("edit", "m1", "abc") and final[0] - refused_at >= 0.95


async def test_a_post_cut_by_the_end_of_the_turn_is_not_made_twice() -> None:
    chat = Recording(hold=asyncio.Event())
    d = draft(chat)
    async with asyncio.timeout(10):
        d.on_delta(text(0, "par"))
        await chat.until(lambda: bool(chat.calls))  # the writer is inside its post
        finishing = asyncio.ensure_future(d.finish("partial reply"))
        await asyncio.sleep(0)  # finish cancels the writer while the post is held
        assert chat.hold is not None and not finishing.done()
        chat.hold.set()
        await finishing
    assert [(w[1], w[3]) for w in chat.writes()] == [("post", "par"),
                                                     ("edit", "partial reply")]  # fmt: skip
