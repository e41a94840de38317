"""Network namespaces for the fault suite: each NATS server and each goondan node in its own
namespace, wired by a veth pair to one bridge; a member is cut off by downing its host end
(symmetric isolation) or loses packets one way by an nftables rule in its namespace (`lose`),
and is healed by raising the end again and deleting the rule. Names carry a per-run prefix
(`gf` + the test process's pid), so parallel runs do not collide and a crashed run's leftovers
are found and deleted by the next one (`sweep`)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass, field

import pytest

from protocol.pids import pid_alive

PREFIX = "gf"
NAME = re.compile(rf"^{PREFIX}(\d+)")


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=10)


def unavailable() -> str | None:
    """Why namespaces cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "the fault suite needs root (network namespaces)"
    if shutil.which("ip") is None:
        return "the fault suite needs `ip` (iproute2)"
    probe = f"{PREFIX}{os.getpid()}probe"
    made = ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    return None


def qdisc_available(*qdisc: str) -> bool:
    """Whether this kernel has a queueing discipline (`netem delay 10ms`, `tbf ...`): tried
    on a throwaway veth."""
    if shutil.which("tc") is None:
        return False
    a, b = f"{PREFIX}{os.getpid()}ta", f"{PREFIX}{os.getpid()}tb"
    if ip("link", "add", a, "type", "veth", "peer", "name", b, check=False).returncode != 0:
        return False
    try:
        tc = subprocess.run(["tc", "qdisc", "add", "dev", a, "root", *qdisc],
                            capture_output=True, check=False, timeout=10)  # fmt: skip
        return tc.returncode == 0
    finally:
        ip("link", "del", a, check=False)


def netem_available() -> bool:
    """netem: a fixed delay (and loss) per packet."""
    return qdisc_available("netem", "delay", "10ms")


def tbf_available() -> bool:
    """tbf: a token bucket, what `Net.throttle` makes a congested link of."""
    return qdisc_available("tbf", "rate", "64kbit", "burst", "1600", "latency", "2s")


NFT_INSTALL = "apt-get install nftables (make install does, as root)"


def nft_unavailable() -> str | None:
    """Why a member cannot lose packets here (None: it can). Under CI=true a missing `nft`
    fails the run, as a missing libfaketime does: a green CI must not hide a missing install
    step; a kernel without nf_tables is the machine's, and only said."""
    if shutil.which("nft") is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no nft command: {NFT_INSTALL}", pytrace=False)
        return f"no nft command: {NFT_INSTALL}"
    return None if nft_available() else "nftables does not work in this kernel"


def nft_available() -> bool:
    """Whether nftables works here (packet loss by rule, where netem is missing): tried in a
    throwaway namespace."""
    if shutil.which("nft") is None:
        return False
    probe = f"{PREFIX}{os.getpid()}nft"
    if ip("netns", "add", probe, check=False).returncode != 0:
        return False
    try:
        return _nft(probe, "add table inet probe").returncode == 0
    finally:
        ip("netns", "del", probe, check=False)


LOSS_TABLE = "gfloss"
"""The nftables table of a member's packet loss (in its own namespace; deleted by `heal`)."""
HOOKS = {"out": "output", "in": "input"}


def _nft(ns: str, command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", ns, "nft", command], capture_output=True,
                          text=True, check=False, timeout=10)  # fmt: skip


def sweep() -> None:
    """Delete the namespaces and links of runs whose process is gone (a crashed or killed run),
    and stop what still runs in those namespaces."""
    for line in ip("netns", "list").stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        found = NAME.match(name)
        if found and not pid_alive(int(found.group(1))):
            stop_members(name)
            ip("netns", "del", name, check=False)
    for line in ip("-o", "link", "show").stdout.splitlines():
        parts = line.split(":")
        if len(parts) < 2:
            continue
        name = parts[1].strip().split("@")[0]
        found = NAME.match(name)
        if found and not pid_alive(int(found.group(1))):
            ip("link", "del", name, check=False)


def stop_members(ns: str) -> None:
    """SIGKILL every process in namespace `ns` (continued first: a paused one). A run killed
    mid-way leaves its NATS servers, nodes and their agents running there, where they load
    the next run's machine and keep the namespace's links alive (seen: two servers and three
    nodes after a SIGTERM)."""
    for pid in (int(p) for p in ip("netns", "pids", ns, check=False).stdout.split()):
        for signal_ in (signal.SIGCONT, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal_)


@dataclass
class Net:
    """One run's bridge and members (`add`); the host has the bridge's .1 address, so the
    tests reach every member and every member reaches the host."""

    tag: str = field(default_factory=lambda: f"{PREFIX}{os.getpid()}")
    subnet: int = field(default_factory=lambda: os.getpid() % 200 + 20)
    members: dict[str, str] = field(default_factory=dict)
    """member -> its address."""
    lossy: set[str] = field(default_factory=set)
    """Members with a loss rule (`lose`), deleted by `heal`."""
    throttled: set[tuple[str, str]] = field(default_factory=set)
    """(member, direction) with a token bucket (`throttle`), deleted by `heal`."""

    @property
    def bridge(self) -> str:
        return f"{self.tag}b"

    @property
    def host(self) -> str:
        return f"10.78.{self.subnet}.1"

    def ns(self, member: str) -> str:
        return f"{self.tag}{member}"

    def end(self, member: str) -> str:
        """The veth end on the bridge (what a cut downs)."""
        return f"{self.tag}{member}h"

    def create(self) -> None:
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.host}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")

    def add(self, member: str) -> str:
        ns, host_end, inner = self.ns(member), self.end(member), self.inner(member)
        address = f"10.78.{self.subnet}.{len(self.members) + 10}"
        ip("netns", "add", ns)
        ip("link", "add", host_end, "type", "veth", "peer", "name", inner)
        ip("link", "set", inner, "netns", ns)
        ip("link", "set", host_end, "master", self.bridge, "up")
        ip("-n", ns, "addr", "add", f"{address}/24", "dev", inner)
        ip("-n", ns, "link", "set", inner, "up")
        ip("-n", ns, "link", "set", "lo", "up")
        self.members[member] = address
        return address

    def exec_prefix(self, member: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns(member)]

    def cut(self, *members: str) -> None:
        for member in members:
            ip("link", "set", self.end(member), "down")

    def lose(self, member: str, direction: str, percent: int) -> None:
        """Drop `percent` % of the packets `member` sends (`out`) or receives (`in`), at random,
        the other way untouched: asymmetric loss, by an nftables rule in its namespace."""
        assert 1 <= percent <= 100, percent
        ns = self.ns(member)
        self.lossy.add(member)
        for command in (
            f"add table inet {LOSS_TABLE}",
            f"add chain inet {LOSS_TABLE} {direction} "
            f"{{ type filter hook {HOOKS[direction]} priority 0 ; }}",
            f"add rule inet {LOSS_TABLE} {direction} numgen random mod 100 <= {percent - 1} drop",
        ):
            done = _nft(ns, command)
            if done.returncode != 0:
                raise RuntimeError(f"nft {command!r} in {ns}: {done.stderr.strip()}")

    def inner(self, member: str) -> str:
        """The veth end inside the member's namespace."""
        return f"{self.tag}{member}n"

    def _queue(self, member: str, direction: str) -> tuple[list[str], str]:
        """(tc's namespace arguments, device) of the queue `member` sends through (`out`: its
        own end) or receives through (`in`: the bridge's end)."""
        if direction == "out":
            return ["-n", self.ns(member)], self.inner(member)
        return [], self.end(member)

    def throttle(self, member: str, direction: str, kbit: int) -> None:
        """A congested link one way: what `member` sends or receives drains at `kbit` kbit/s
        through a queue of up to 2 s, so packets wait (a delay that grows with the load)
        before any is dropped. A token bucket (tbf), where netem's fixed delay is missing."""
        netns, dev = self._queue(member, direction)
        self.throttled.add((member, direction))
        done = subprocess.run(["tc", *netns, "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                               f"{kbit}kbit", "burst", "1600", "latency", "2s"],
                              capture_output=True, text=True, check=False, timeout=10)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"tc tbf on {dev}: {done.stderr.strip()}")

    def heal(self) -> None:
        for member in self.members:
            ip("link", "set", self.end(member), "up")
        for member in self.lossy:
            _nft(self.ns(member), f"delete table inet {LOSS_TABLE}")
        self.lossy.clear()
        for member, direction in self.throttled:
            netns, dev = self._queue(member, direction)
            subprocess.run(["tc", *netns, "qdisc", "del", "dev", dev, "root"],
                           capture_output=True, check=False, timeout=10)  # fmt: skip
        self.throttled.clear()

    def destroy(self) -> None:
        for member in self.members:
            ip("netns", "del", self.ns(member), check=False)
            ip("link", "del", self.end(member), check=False)
        ip("link", "del", self.bridge, check=False)
        self.members.clear()
