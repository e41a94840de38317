"""sd_notify without libsystemd: READY / STATUS / RELOADING / STOPPING / WATCHDOG datagrams.

systemd passes `NOTIFY_SOCKET` (a path, or `@name` for an abstract socket) to a `Type=notify`
service; each notification is one datagram of `KEY=value` lines. Without `NOTIFY_SOCKET` every
call is a no-op, so the daemon calls the same methods in a terminal and under systemd.

Sends never block the event loop: the socket is non-blocking and a datagram that cannot be
queued right now is dropped (systemd reads them promptly; the next STATUS or WATCHDOG repeats
the news). A notifier never raises on a send: notification is best effort by design.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, MutableMapping

ENV_NOTIFY_SOCKET = "NOTIFY_SOCKET"
ENV_WATCHDOG_USEC = "WATCHDOG_USEC"
ENV_WATCHDOG_PID = "WATCHDOG_PID"
_OWN_VARIABLES = (ENV_NOTIFY_SOCKET, ENV_WATCHDOG_USEC, ENV_WATCHDOG_PID)
STATUS_INTERVAL = 5.0
"""How often STATUS= is refreshed when there is no watchdog to piggyback on (seconds)."""


def socket_address(value: str) -> str | bytes:
    """The sendto() address for a NOTIFY_SOCKET value: `@name` is the abstract `\\0name`."""
    if value.startswith("@"):
        return b"\0" + os.fsencode(value[1:])
    return value


def monotonic_usec() -> int:
    """CLOCK_MONOTONIC in microseconds, the clock systemd compares RELOADING=1 against."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


class Notifier:
    """One service's channel to systemd. Build it with `Notifier.from_env()` at start-up."""

    def __init__(
        self,
        address: str | None,
        *,
        watchdog_usec: int | None = None,
        watchdog_pid: int | None = None,
    ) -> None:
        self.address = address
        self.watchdog_usec = watchdog_usec
        self.watchdog_pid = watchdog_pid
        self._sock: socket.socket | None = None

    @classmethod
    def from_env(
        cls,
        environ: MutableMapping[str, str] | None = None,
        *,
        unset_environment: bool = False,
    ) -> Notifier:
        """Read NOTIFY_SOCKET / WATCHDOG_USEC / WATCHDOG_PID (os.environ by default).

        `unset_environment` removes them afterwards, so agent processes started later do not
        inherit a socket that is not theirs (what sd_notify's `unset_environment` does).
        """
        env = os.environ if environ is None else environ
        address = env.get(ENV_NOTIFY_SOCKET) or None
        notifier = cls(
            address,
            watchdog_usec=_positive_int(env.get(ENV_WATCHDOG_USEC)),
            watchdog_pid=_positive_int(env.get(ENV_WATCHDOG_PID)),
        )
        if unset_environment:
            for name in _OWN_VARIABLES:
                env.pop(name, None)
        return notifier

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, fields: Mapping[str, str | int]) -> bool:
        """Send one datagram of `KEY=value` lines; True when it was handed to the kernel."""
        if self.address is None:
            return False
        # STATUS is free text: a newline would start a bogus assignment.
        text = "\n".join(f"{k}={str(v).replace(chr(10), ' ')}" for k, v in fields.items())
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._sock.setblocking(False)
            self._sock.sendto(text.encode(), socket_address(self.address))
        except OSError:
            # Best effort: systemd gone, queue full or socket missing must not stop the daemon.
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        """READY=1: the bundle is loaded and the sockets are bound (also after a reload)."""
        fields: dict[str, str | int] = {"READY": 1}
        if status is not None:
            fields["STATUS"] = status
        return self.notify(fields)

    def status(self, text: str) -> bool:
        return self.notify({"STATUS": text})

    def reloading(self, status: str | None = None) -> bool:
        """RELOADING=1 with MONOTONIC_USEC; send `ready()` when the restart is done."""
        fields: dict[str, str | int] = {"RELOADING": 1, "MONOTONIC_USEC": monotonic_usec()}
        if status is not None:
            fields["STATUS"] = status
        return self.notify(fields)

    def stopping(self, status: str | None = None) -> bool:
        fields: dict[str, str | int] = {"STOPPING": 1}
        if status is not None:
            fields["STATUS"] = status
        return self.notify(fields)

    def extend_timeout(self, seconds: float) -> bool:
        """EXTEND_TIMEOUT_USEC: ask for more time to start or stop (a long drain)."""
        return self.notify({"EXTEND_TIMEOUT_USEC": int(seconds * 1_000_000)})

    def watchdog(self) -> bool:
        return self.notify({"WATCHDOG": 1})

    def watchdog_interval(self) -> float | None:
        """Seconds between WATCHDOG=1 pings (half of WATCHDOG_USEC), or None when the
        watchdog is off, is meant for another pid, or there is no socket to ping."""
        if self.address is None or self.watchdog_usec is None:
            return None
        if self.watchdog_pid is not None and self.watchdog_pid != os.getpid():
            return None
        return self.watchdog_usec / 2_000_000

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


async def watchdog_loop(
    notifier: Notifier,
    is_alive: Callable[[], bool],
    *,
    interval: float | None = None,
    status: Callable[[], str] | None = None,
) -> None:
    """Send WATCHDOG=1 every `interval` (default: half of WATCHDOG_USEC) while `is_alive()`,
    and `STATUS=status()` in the same datagram whenever that text changed.

    When the probe says the broker is stuck, the ping is withheld, so systemd kills and
    restarts the service once WatchdogSec passes; a blocked event loop withholds it too, since
    this coroutine cannot run. Without a watchdog it only refreshes STATUS (every
    STATUS_INTERVAL), and without a socket it returns at once. Cancel it to stop.
    """
    if not notifier.enabled:
        return
    period = interval if interval is not None else notifier.watchdog_interval()
    watchdog = period is not None
    if period is None:
        if status is None:
            return
        period = STATUS_INTERVAL
    last_status: str | None = None
    while True:
        fields: dict[str, str | int] = {}
        if watchdog and is_alive():
            fields["WATCHDOG"] = 1
        text = status() if status is not None else None
        if text is not None and text != last_status:
            fields["STATUS"] = last_status = text
        if fields:
            notifier.notify(fields)
        await asyncio.sleep(period)


class RestartNotices:
    """RELOADING=1 ... READY=1 around `goondan restart` (`Supervisor.add_restart_listener`);
    a bundle reload sends its own."""

    def __init__(self, notifier: Notifier, status: Callable[[], str]) -> None:
        self.notifier = notifier
        self.status = status

    def restart_started(self) -> None:
        self.notifier.reloading(self.status())

    def restart_finished(self) -> None:
        self.notifier.ready(self.status())


def status_text(swarm: str, statuses: Iterable[str]) -> str:
    """`STATUS=` text from the process table: `swarm hello: 3 processes (2 idle, 1 processing)`."""
    counts = Counter(str(s) for s in statuses)
    total = sum(counts.values())
    noun = "process" if total == 1 else "processes"
    detail = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    return f"swarm {swarm}: {total} {noun}" + (f" ({detail})" if detail else "")


def _positive_int(raw: str | None) -> int | None:
    try:
        value = int(raw) if raw else None
    except ValueError:
        return None
    return value if value is not None and value > 0 else None
