"""The fault suite's one-way link faults: a member loses (`Net.lose`) or is throttled on
(`Net.throttle`) what it sends or what it receives, never both, and `heal` gives it back.
Checked with UDP (no retransmission hides a loss): the host sends datagrams to a member that
answers each one."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Callable

import pytest

from tests.faults import netns

ECHO = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 9999))
print("ready", flush=True)
s.settimeout(1.0)
got = 0
try:
    while True:
        data, peer = s.recvfrom(2000)
        got += 1
        try:
            s.sendto(data, peer)
        except PermissionError:  # dropped on the way out: a local sender is told (TCP retries)
            pass
except TimeoutError:
    pass
print(got, flush=True)
"""
SENT = 10


Address = tuple[str, int]


def talk_to_echo(
    net: netns.Net, member: str, talk: Callable[[socket.socket, Address], int]
) -> tuple[int, int]:
    """Run ECHO in `member`, `talk(sock, its address)` to it from the host (returning the
    answers it got); (datagrams the member received, answers the host received)."""
    echo = subprocess.Popen([*net.exec_prefix(member), sys.executable, "-c", ECHO],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert echo.stdout is not None and echo.stdout.readline().strip() == "ready"
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            answered = talk(sock, (net.members[member], 9999))
        out, _ = echo.communicate(timeout=10)
        return int(out.strip()), answered
    finally:
        if echo.poll() is None:
            echo.kill()
            echo.wait(timeout=10)


def exchange(net: netns.Net, member: str) -> tuple[int, int]:
    """SENT datagrams, each waiting for its answer a moment."""

    def talk(sock: socket.socket, to: Address) -> int:
        sock.settimeout(0.2)
        answered = 0
        for i in range(SENT):
            sock.sendto(str(i).encode(), to)
            with contextlib.suppress(TimeoutError):
                sock.recvfrom(100)
                answered += 1
        return answered

    return talk_to_echo(net, member, talk)


def burst(net: netns.Net, member: str, count: int, size: int = 1000) -> tuple[int, int]:
    """`count` datagrams of `size` bytes sent at once, then their answers."""

    def talk(sock: socket.socket, to: Address) -> int:
        for i in range(count):
            sock.sendto(str(i).encode().ljust(size), to)
        sock.settimeout(1.5)  # a throttled queue drains a datagram every 0.25 s or faster
        answered = 0
        with contextlib.suppress(TimeoutError):
            while answered < count:
                sock.recvfrom(2000)
                answered += 1
        return answered

    return talk_to_echo(net, member, talk)


def test_a_throttled_member_gets_one_way_only_what_its_queue_holds(net: netns.Net) -> None:
    """40 kB at once through 32 kbit/s with a queue of 2 s: what does not fit is dropped (the
    rest waits, which is the fault's point: its delay is not asserted)."""
    if not netns.tbf_available():
        pytest.skip("no tbf qdisc in this kernel")
    net.add("m1")
    assert burst(net, "m1", 40) == (40, 40)
    net.throttle("m1", "in", 32)
    received, answered = burst(net, "m1", 40)
    assert 0 < received < 20 and answered == received  # its answers go out unthrottled
    net.heal()
    net.throttle("m1", "out", 32)
    received, answered = burst(net, "m1", 40)
    assert received == 40 and 0 < answered < 20
    net.heal()
    assert burst(net, "m1", 40) == (40, 40)


def test_a_member_loses_one_way_only_until_healed(net: netns.Net) -> None:
    reason = netns.nft_unavailable()
    if reason is not None:
        pytest.skip(reason)
    net.add("m1")
    assert exchange(net, "m1") == (SENT, SENT)
    net.lose("m1", "out", 100)
    assert exchange(net, "m1") == (SENT, 0)  # it hears everything, nobody hears it
    net.heal()
    net.lose("m1", "in", 100)
    assert exchange(net, "m1") == (0, 0)  # it hears nothing (so answers nothing)
    net.heal()
    assert exchange(net, "m1") == (SENT, SENT)


def test_a_killed_runs_namespaces_are_swept_with_what_still_runs_in_them(net: netns.Net) -> None:
    """As a run killed by SIGTERM leaves them: a namespace named for a dead process, with a
    process in it (one paused, as a `node_pause` leaves it)."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=10)
    ns = f"{netns.PREFIX}{gone.pid}s1"
    netns.ip("netns", "add", ns)
    left = subprocess.Popen(["ip", "netns", "exec", ns, "sh", "-c", "echo in; exec sleep 300"],
                            stdout=subprocess.PIPE)  # fmt: skip
    assert left.stdout is not None
    try:
        assert left.stdout.readline() == b"in\n"  # it is in the namespace now
        left.send_signal(19)  # SIGSTOP
        netns.sweep()
        assert left.wait(timeout=10) == -9  # SIGKILLed though paused
        names = netns.ip("netns", "list").stdout.split()
        assert ns not in names
    finally:
        if left.poll() is None:
            left.kill()
            left.wait(timeout=10)
        left.stdout.close()
        netns.ip("netns", "del", ns, check=False)
