"""The fault suite's one-way packet loss (`Net.lose`): a member loses what it sends or what
it receives, never both, and `heal` gives it back. Checked with UDP (no retransmission hides
a loss): the host sends datagrams to a member that answers each one."""

from __future__ import annotations

import socket
import subprocess
import sys

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
        data, peer = s.recvfrom(100)
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


def exchange(net: netns.Net, member: str) -> tuple[int, int]:
    """(datagrams the member received, answers the host received) of SENT sent."""
    echo = subprocess.Popen([*net.exec_prefix(member), sys.executable, "-c", ECHO],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert echo.stdout is not None and echo.stdout.readline().strip() == "ready"
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(0.2)
            answered = 0
            for i in range(SENT):
                sock.sendto(str(i).encode(), (net.members[member], 9999))
                try:
                    sock.recvfrom(100)
                    answered += 1
                except TimeoutError:
                    pass
        out, _ = echo.communicate(timeout=10)
        return int(out.strip()), answered
    finally:
        if echo.poll() is None:
            echo.kill()
            echo.wait(timeout=10)


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
