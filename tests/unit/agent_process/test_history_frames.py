"""Cluster mode's `history` frames: every conversation event goes to the node, in order with
the frames `send` sends (a turn's reply never overtakes its appends)."""

from __future__ import annotations

from pathlib import Path

from agent_process.link import Link
from agent_process.store import ConversationStore
from protocol.codec import decode_message
from protocol.ids import parse_process_id
from protocol.launch import ChildLaunch, LaunchSettings
from protocol.messages import (
    ChildState,
    History,
    HistoryPayload,
    Status,
    StatusPayload,
)


class Sock:
    """Frames as the socket takes them; the first `blocked` nowait sends are refused
    (the high-water mark)."""

    def __init__(self, blocked: int = 0) -> None:
        self.sent: list[bytes] = []
        self.blocked = blocked

    def send_nowait(self, data: bytes) -> bool:
        if self.blocked:
            self.blocked -= 1
            return False
        self.sent.append(data)
        return True

    async def send(self, data: bytes) -> None:
        self.sent.append(data)

    async def recv(self) -> bytes:
        raise AssertionError("not used")


def link(sock: Sock) -> Link:
    settings = LaunchSettings(endpoint="ipc:///x", swarm="s", bundle="b", state_root="/tmp",
                              history_frames=True)  # fmt: skip
    return Link(ChildLaunch(process=parse_process_id("agent:a:k:1"), settings=settings), sock)


def frame(n: int) -> History:
    return History(from_="agent:a:k:1", to="orchestrator", payload=HistoryPayload(line=b"%d" % n))


async def test_posted_frames_keep_their_order_when_the_socket_is_full() -> None:
    sock = Sock(blocked=1)
    link_ = link(sock)
    link_.post(frame(1))  # refused by the socket: held
    link_.post(frame(2))  # behind it, never before
    status = Status(from_="agent:a:k:1", to="orchestrator",
                    payload=StatusPayload(state=ChildState.IDLE))  # fmt: skip
    await link_.send(status)
    decoded = [decode_message(d) for d in sock.sent]
    assert decoded == [frame(1), frame(2), status]


def test_the_store_tells_its_mirror_each_line_it_writes(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "messages")
    lines: list[bytes] = []
    store.open()
    store.mirror = lines.append
    store.append("user", "hi")
    message = store.append("assistant", "hello")
    store.replace(message.id, "hello!")
    store.close()
    events = tmp_path / "messages" / "events.jsonl"
    written = events.read_bytes() if events.exists() else b""  # an emptied one is removed
    assert len(lines) == 3
    assert all(line.endswith(b"\n") for line in lines)
    assert written in (b"", b"".join(lines))  # folded at close: the events file is emptied
