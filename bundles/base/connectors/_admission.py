"""Which connections an HTTP server of the connectors keeps open (`_http.py`; each connection
is a `_connection.Connection`).

A server takes at most `maxConnections` connections, and at most `maxConnectionsPerClient`
from one client address. At a limit, a new connection does not wait and is not refused while
an idle one is open: the oldest connection without a request in progress (one that has not
sent a whole request head yet, a keep-alive connection between requests, a refused request
whose body is being discarded) is closed to make room, the client's own first when its
address is at its limit. So sockets that only hold a place (a thousand idle ones, a client
trickling its headers) cannot lock out a client that sends requests; only requests in
progress count against the others, and they are bounded by their deadlines.

Loaded by path with `bundles.sdk.load_sibling` (bundles/base is not a Python package).
"""

from __future__ import annotations

from collections import Counter
from typing import Protocol


class Held(Protocol):
    """A connection as admission sees it."""

    def idle(self) -> bool:
        """No request in progress: it may be closed to make room."""
        ...

    def evict(self) -> None:
        """Close it to make room (it leaves the admission on its own)."""
        ...


class Admission:
    def __init__(self, max_connections: int, max_per_client: int) -> None:
        self.max_connections = max_connections
        self.max_per_client = max_per_client
        self._open: dict[Held, str] = {}
        """Open connections, oldest first, with their client address."""
        self._per_client: Counter[str] = Counter()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._open)

    def admit(self, conn: Held, client: str) -> bool:
        """Take `conn` (from `client`), closing idle ones to make room; False: every open
        connection has a request in progress, and `conn` must be refused."""
        if self._per_client[client] >= self.max_per_client and not self._evict(client):
            return False
        if len(self._open) >= self.max_connections and not self._evict(None):
            return False
        self._open[conn] = client
        self._per_client[client] += 1
        return True

    def leave(self, conn: Held) -> None:
        client = self._open.pop(conn, None)
        if client is None:
            return
        self._per_client[client] -= 1
        if self._per_client[client] <= 0:
            del self._per_client[client]

    def _evict(self, client: str | None) -> bool:
        """Close the oldest idle connection (of `client`, when given)."""
        victim = next(
            (c for c, at in self._open.items() if (client is None or at == client) and c.idle()),
            None,
        )
        if victim is None:
            return False
        self.leave(victim)
        self.evicted += 1
        victim.evict()
        return True
