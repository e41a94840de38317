"""What the HTTP connectors check before a request may start a turn.

- **Browsers.** A web page can make the user's browser POST to a server on 127.0.0.1, and a
  DNS-rebinding page can even read the answer. So a request that carries an `Origin` header
  (browsers send one with every cross-site POST) is refused unless the origin is allowed, the
  body must be `application/json` (a page cannot send that type without a CORS preflight,
  which these servers never grant), and the `Host` must be an IP literal, `localhost` or a
  configured name: a rebinding page's Host is its own domain name.
- **Signatures.** `X-Goondan-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">` with
  `X-Goondan-Timestamp: <unix seconds>`: a request older than the freshness window is refused,
  and a signature seen within the window is refused as a replay (the cache survives restarts
  when the connector has a state directory).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import json
import os
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SIGNATURE_HEADER = "x-goondan-signature"
TIMESTAMP_HEADER = "x-goondan-timestamp"
DEFAULT_MAX_AGE = 300.0
REPLAY_MAX_ENTRIES = 100_000


class HttpError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class BrowserPolicy:
    allowed_origins: frozenset[str] = frozenset()
    allowed_hosts: frozenset[str] = frozenset()

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> BrowserPolicy:
        return cls(
            allowed_origins=_names(config.get("allowedOrigins", [])),
            allowed_hosts=_names(config.get("allowedHosts", [])),
        )


def flag(config: Mapping[str, Any], name: str) -> bool:
    """A yes/no setting of a Connection's config, strictly: a YAML boolean or "true"/"false".
    Anything else is a start error, never a guess: `allowUnsigned: "no"` read as truthy would
    open a server to unsigned requests."""
    value = str(config.get(name, "false")).strip().lower()
    if value not in ("true", "false"):
        raise RuntimeError(f"config.{name} is {value!r}: write true or false")
    return value == "true"


def _names(value: Any) -> frozenset[str]:
    items: Iterable[Any] = value if isinstance(value, list) else [value]
    return frozenset(str(v).strip().lower().rstrip("/") for v in items if v)


def _host_name(host: str) -> str:
    """`[::1]:8787` -> `::1`, `example.com:80` -> `example.com`."""
    if host.startswith("["):
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if host.count(":") == 1 else host


@functools.lru_cache(maxsize=256)
def _is_ip(name: str) -> bool:
    """Remembered for the few names a server's clients send (~1.9 µs a parse, every request);
    bounded, so Host values made up by the thousand only churn it."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def check_browser(headers: Mapping[str, str], policy: BrowserPolicy) -> None:
    """Raise HttpError unless the request looks like a server's, not a web page's."""
    origin = headers.get("origin")
    if origin is not None and origin.strip().lower().rstrip("/") not in policy.allowed_origins:
        raise HttpError(403, "E_HTTP_ORIGIN", f"requests from web pages ({origin}) are refused; "
                        "list the origin in config.allowedOrigins to allow it")  # fmt: skip
    host = headers.get("host", "").strip().lower()
    if not host:
        raise HttpError(400, "E_HTTP_HOST", "the request has no Host header")
    name = _host_name(host)
    if not (_is_ip(name) or name == "localhost" or name in policy.allowed_hosts):
        raise HttpError(421, "E_HTTP_HOST", f"Host {host!r} is not this server's; list the "
                        "name in config.allowedHosts to serve it")  # fmt: skip


def check_json(headers: Mapping[str, str]) -> None:
    media = headers.get("content-type", "").partition(";")[0].strip().lower()
    if media != "application/json":
        raise HttpError(415, "E_HTTP_CONTENT_TYPE",
                        "send the body as JSON with Content-Type: application/json")  # fmt: skip


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    """The `X-Goondan-Signature` value of `body` sent at `timestamp` (for clients and tests)."""
    digest = hmac.new(secret, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def check_signature(
    secret: bytes, headers: Mapping[str, str], body: bytes, max_age: float, now: float
) -> tuple[str, float]:
    """(signature, timestamp) of a fresh, correctly signed request; HttpError(401) otherwise."""
    stamp = headers.get(TIMESTAMP_HEADER, "").strip()
    given = headers.get(SIGNATURE_HEADER, "").strip().lower()
    if not stamp.isdigit() or not given.startswith("sha256="):
        raise HttpError(401, "E_WEBHOOK_SIGNATURE", "sign the request: X-Goondan-Timestamp: "
                        "<unix seconds> and X-Goondan-Signature: sha256=<hex HMAC-SHA256 of "
                        "'<timestamp>.<body>'>")  # fmt: skip
    if abs(now - int(stamp)) > max_age:
        raise HttpError(401, "E_WEBHOOK_STALE", f"the timestamp is more than {max_age:g} s "
                        "from this server's clock; sign each request when you send it")  # fmt: skip
    if not hmac.compare_digest(sign(secret, stamp, body), given):
        raise HttpError(401, "E_WEBHOOK_SIGNATURE", "the signature does not match the body")
    return given, float(stamp)


class ReplayCache:
    """Signatures accepted within the freshness window; a second use is a replay.

    Persisted as JSON lines in `path` (if given), so a restarted connector still refuses a
    request it accepted a moment before; entries older than the window are dropped on load.
    """

    def __init__(self, max_age: float, path: Path | None, now: float) -> None:
        self._max_age = max_age
        self._path = path
        self._seen: OrderedDict[str, float] = OrderedDict()
        if path is not None:
            self._load(path, now)

    def _load(self, path: Path, now: float) -> None:
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except OSError:
            return
        for line in lines:
            try:
                entry = json.loads(line)
                self._seen[str(entry["s"])] = float(entry["t"])
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line after a crash
        self._expire(now)
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CREAT | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:  # compacted: only what still counts
            out.writelines(json.dumps({"s": s, "t": t}) + "\n" for s, t in self._seen.items())

    def _expire(self, now: float) -> None:
        while self._seen:
            signature, stamp = next(iter(self._seen.items()))
            if now - stamp <= self._max_age and len(self._seen) <= REPLAY_MAX_ENTRIES:
                break
            del self._seen[signature]

    def remember(self, signature: str, stamp: float, now: float) -> None:
        """Record a fresh signature; HttpError(409) when it was used before."""
        self._expire(now)
        if signature in self._seen:
            message = "this signed request was accepted before; sign it anew to send it again"
            raise HttpError(409, "E_WEBHOOK_REPLAY", message)
        self._seen[signature] = stamp
        if self._path is not None:
            fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as out:
                out.write(json.dumps({"s": signature, "t": stamp}) + "\n")
