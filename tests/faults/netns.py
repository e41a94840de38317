"""Network namespaces for the fault suite: each NATS server and each goondan node in its own
namespace, wired by a veth pair to one bridge; a member is cut off by downing its host end
(symmetric isolation) and healed by raising it again. Names carry a per-run prefix (`gf` + the
test process's pid), so parallel runs do not collide and a crashed run's leftovers are found
and deleted by the next one (`sweep`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

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


def netem_available() -> bool:
    """Whether this kernel has the netem qdisc (loss, delay): tried on a throwaway veth."""
    if shutil.which("tc") is None:
        return False
    a, b = f"{PREFIX}{os.getpid()}ta", f"{PREFIX}{os.getpid()}tb"
    if ip("link", "add", a, "type", "veth", "peer", "name", b, check=False).returncode != 0:
        return False
    try:
        tc = subprocess.run(["tc", "qdisc", "add", "dev", a, "root", "netem", "delay", "10ms"],
                            capture_output=True, check=False, timeout=10)  # fmt: skip
        return tc.returncode == 0
    finally:
        ip("link", "del", a, check=False)


def sweep() -> None:
    """Delete the namespaces and links of runs whose process is gone (a crashed run)."""
    for line in ip("netns", "list").stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        found = NAME.match(name)
        if found and not pid_alive(int(found.group(1))):
            ip("netns", "del", name, check=False)
    for line in ip("-o", "link", "show").stdout.splitlines():
        parts = line.split(":")
        if len(parts) < 2:
            continue
        name = parts[1].strip().split("@")[0]
        found = NAME.match(name)
        if found and not pid_alive(int(found.group(1))):
            ip("link", "del", name, check=False)


@dataclass
class Net:
    """One run's bridge and members (`add`); the host has the bridge's .1 address, so the
    tests reach every member and every member reaches the host."""

    tag: str = field(default_factory=lambda: f"{PREFIX}{os.getpid()}")
    subnet: int = field(default_factory=lambda: os.getpid() % 200 + 20)
    members: dict[str, str] = field(default_factory=dict)
    """member -> its address."""

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
        ns, host_end, inner = self.ns(member), self.end(member), f"{self.tag}{member}n"
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

    def heal(self) -> None:
        for member in self.members:
            ip("link", "set", self.end(member), "up")

    def destroy(self) -> None:
        for member in self.members:
            ip("netns", "del", self.ns(member), check=False)
            ip("link", "del", self.end(member), check=False)
        ip("link", "del", self.bridge, check=False)
        self.members.clear()
