"""A sandbox's network allow-list (`Tool.spec.sandbox.network.allow`): an HTTP proxy outside.

With an allow-list the sandbox has no network of its own (bubblewrap's `--unshare-net`: only a
loopback of its own). This module's proxy listens on a unix socket in a private directory of
the call, bound into the sandbox; inside, `FORWARDER` (a `python3 -S` one-liner started before
the command) listens on 127.0.0.1:`PORT` and relays each connection to that socket, and the
command gets HTTP(S)_PROXY/ALL_PROXY pointing there. The proxy takes HTTP CONNECT (https and
any TLS) and plain requests with an absolute URI (http), and opens a connection only to a host
and port the allow-list names, to an address it resolved itself: a name that resolves to a
loopback, private, link-local or otherwise non-global address is refused unless the address
is listed literally (a listed name cannot be pointed at the inside by its DNS). Whatever does
not use the proxy has no network at all: the allow-list fails closed.

Entries: `host`, `*.suffix` (its subdomains, not itself), an IPv4 or `[IPv6]` literal, each
with an optional `:port`; without one, ports 80 and 443 only.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import re
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from bundles.sdk import load_sibling

if TYPE_CHECKING:
    from bundles.base.tools import _netguard
else:
    _netguard = load_sibling(__file__, "_netguard")

PORT = 3128
"""The forwarder's port inside the sandbox: its loopback is its own, so nothing else holds it."""
SOCKET_NAME = "proxy.sock"
DEFAULT_PORTS = (80, 443)
MAX_CONNECTIONS = 64
"""Open proxy connections of one call at most; more get 503 (a loop cannot pin the agent)."""
_HEAD_LIMIT = 16 * 1024
_HEAD_SECONDS = 10.0
_CONNECT_SECONDS = 10.0
_CHUNK = 64 * 1024
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_HOP_HEADERS = frozenset(
    {b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive"}
)

FORWARDER = """\
import os,sys,_socket as S,_thread as T
s=S.socket(S.AF_INET,S.SOCK_STREAM);s.setsockopt(S.SOL_SOCKET,S.SO_REUSEADDR,1)
s.bind(("127.0.0.1",int(sys.argv[2])));s.listen(64)
def pipe(a,b,done=None):
  try:
    while d:=a.recv(65536):b.sendall(d)
  except OSError:pass
  try:b.shutdown(S.SHUT_WR)
  except OSError:pass
  if done:done.release()
def conn(fd):
  c=S.socket(S.AF_INET,S.SOCK_STREAM,0,fd);u=S.socket(S.AF_UNIX,S.SOCK_STREAM)
  try:u.connect(sys.argv[1])
  except OSError:c.close();u.close();return
  l=T.allocate_lock();l.acquire();T.start_new_thread(pipe,(u,c,l));pipe(c,u);l.acquire()
  c.close();u.close()
if os.fork()==0:
  if os.fork():os._exit(0)
  while 1:
    fd,_=s._accept();T.start_new_thread(conn,(fd,))
os.wait();s.close();os.execvp(sys.argv[3],sys.argv[3:])
"""
"""Listens first, then leaves a relay behind (twice forked: the command's children are its
own, and the sandbox's init reaps it) and becomes the command. argv: socket, port, command.
The C modules `_socket` and `_thread`, not `socket` and `threading`: their imports (enum,
selectors) cost a call more than the rest of the forwarder."""


@dataclass(frozen=True, slots=True)
class Rule:
    """One allow-list entry: `host` exact (a name or an address's text), or its subdomains
    (`wildcard`), on `port` (None: 80 and 443)."""

    host: str
    port: int | None
    wildcard: bool = False
    literal: bool = False

    def matches(self, host: str, port: int) -> bool:
        if port not in ((self.port,) if self.port is not None else DEFAULT_PORTS):
            return False
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host


def _split_port(entry: str) -> tuple[str, str | None]:
    if entry.startswith("["):
        host, sep, rest = entry[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError("an IPv6 address is written [address] or [address]:port")
        return "[" + host + "]", rest[1:] if rest else None
    if entry.count(":") > 1:
        return entry, None  # a bare IPv6 address
    host, sep, port = entry.partition(":")
    return host, port if sep else None


def _port(text: str | None) -> int | None:
    if text is None:
        return None
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ValueError(f"port {text!r} is not a number from 1 to 65535")
    return int(text)


def _address(host: str) -> str | None:
    """The canonical text of `host` when it is an IP address ([v6] too), else None."""
    try:
        return str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return None


def parse_rule(entry: object) -> Rule:
    """An allow-list entry, or ValueError saying what is wrong with it."""
    if not isinstance(entry, str) or not entry or entry != entry.strip():
        raise ValueError("an entry is a host name, *.domain or IP address, with an optional :port")
    if "/" in entry or "@" in entry:
        raise ValueError("write a host (and :port), not a URL")
    host, port_text = _split_port(entry.lower().rstrip("."))
    port = _port(port_text)
    address = _address(host)
    if address is not None and (":" in address or not host.startswith("[")):
        return Rule(address, port, literal=True)
    if host.startswith("["):
        raise ValueError(f"{host} is not an IPv6 address (IPv4 goes without brackets)")
    wildcard = host.startswith("*.")
    name = host[2:] if wildcard else host
    labels = name.split(".")
    if len(name) > 253 or not all(map(_LABEL.match, labels)) or labels[-1].isdigit():
        raise ValueError(f"{host!r} is not a host name (letters, digits, '-', dots; *.domain)")
    if wildcard and len(labels) < 2:
        raise ValueError(f"{host!r} would open a whole top-level domain: name one below it")
    return Rule(name, port, wildcard=wildcard)


def parse_allow(entries: Iterable[object]) -> tuple[Rule, ...]:
    """The rules of `network.allow`; ValueError names the first bad entry."""
    rules = []
    for i, entry in enumerate(entries):
        try:
            rules.append(parse_rule(entry))
        except ValueError as exc:
            raise ValueError(f"network.allow[{i}] {entry!r}: {exc}") from None
    return tuple(rules)


def _normal_host(host: str) -> str:
    host = host.lower().rstrip(".")
    return _address(host) or host


async def destination(rules: Iterable[Rule], host: str, port: int) -> tuple[list[str], str | None]:
    """The addresses to try for `host`:`port` in order, or ([], why it is refused)."""
    host = _normal_host(host)
    rule = next((r for r in rules if r.matches(host, port)), None)
    if rule is None:
        return [], "not in the sandbox's network allow-list"
    if rule.literal:
        return [host], None  # listed as this very address: the operator meant it
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        return [], f"does not resolve: {exc}"
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    for ip in addresses:
        reason = _netguard.blocked_reason(ip)
        if reason is not None:  # any: a mixed answer cannot smuggle an inside address in
            return [], f"resolves to {ip} ({reason}); list the address itself to allow it"
    if not addresses:
        return [], "does not resolve"
    return list(dict.fromkeys(map(str, addresses))), None


async def _open(
    addresses: list[str], port: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The first of `addresses` that answers (an IPv6 one first may have no route here)."""
    for address in addresses[:-1]:
        with contextlib.suppress(OSError, TimeoutError):
            async with asyncio.timeout(_CONNECT_SECONDS):
                return await asyncio.open_connection(address, port)
    async with asyncio.timeout(_CONNECT_SECONDS):
        return await asyncio.open_connection(addresses[-1], port)


def _response(status: str, text: str) -> bytes:
    body = f"goondan sandbox: {text}\n".encode()
    head = f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"Connection: close\r\n\r\n" + body


@dataclass(frozen=True, slots=True)
class _Request:
    host: str
    port: int
    connect: bool
    head: bytes
    """What goes upstream first: nothing for CONNECT, the rewritten head of a plain request."""


def _split_hostport(text: str, default: int) -> tuple[str, int]:
    host, port = _split_port(text)
    return host.strip("[]"), _port(port) or default


def parse_request(head: bytes) -> _Request:
    """The proxy request in `head` (ValueError: not one we take)."""
    line, _, rest = head.partition(b"\r\n")
    method, target, version = line.decode("latin-1").split(" ")
    if method == "CONNECT":
        host, port = _split_hostport(target, 443)
        return _Request(host, port, True, b"")
    url = urlsplit(target)
    if url.scheme != "http" or not url.hostname:
        raise ValueError("only CONNECT and http://absolute-URI requests go through")
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    headers = [h for h in rest.split(b"\r\n") if h]
    kept = [h for h in headers if h.split(b":", 1)[0].strip().lower() not in _HOP_HEADERS]
    first = f"{method} {path} {version}".encode("latin-1")
    upstream = b"\r\n".join([first, *kept, b"Connection: close"]) + b"\r\n\r\n"
    return _Request(url.hostname, url.port or 80, False, upstream)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


class Proxy:
    """One call's proxy: `rules` decide, denials go to `log` as `sandbox_network_denied`."""

    def __init__(self, rules: tuple[Rule, ...], log: Any, tool: str, limit: int) -> None:
        self.rules, self.log, self.tool, self.limit = rules, log, tool, limit
        self.tasks: set[asyncio.Task[None]] = set()
        self.writers: set[asyncio.StreamWriter] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        self.writers.add(writer)
        try:
            if len(self.tasks) > self.limit:
                self.log.warning("sandbox_network_busy", tool=self.tool, limit=self.limit)
                writer.write(_response("503 Service Unavailable", "too many connections"))
                return
            await self._serve(reader, writer)
        except (ConnectionError, OSError, TimeoutError, asyncio.IncompleteReadError):
            pass  # the client went away or sent no request in time
        finally:
            self.tasks.discard(task)
            self.writers.discard(writer)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(_HEAD_SECONDS):
                request = parse_request(await reader.readuntil(b"\r\n\r\n"))
        except (ValueError, asyncio.LimitOverrunError) as exc:
            writer.write(_response("400 Bad Request", str(exc)))
            return
        addresses, refused = await destination(self.rules, request.host, request.port)
        if refused is not None:
            self.log.warning(
                "sandbox_network_denied",
                tool=self.tool, host=request.host, port=request.port, reason=refused,
            )  # fmt: skip
            writer.write(_response("403 Forbidden", f"{request.host}:{request.port} {refused}"))
            return
        try:
            up_reader, up_writer = await _open(addresses, request.port)
        except (OSError, TimeoutError) as exc:
            writer.write(_response("502 Bad Gateway", f"{request.host}: {exc}"))
            return
        self.writers.add(up_writer)
        try:
            if request.connect:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                up_writer.write(request.head)
            await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))
        finally:
            self.writers.discard(up_writer)
            up_writer.close()

    async def close(self) -> None:
        for writer in list(self.writers):
            writer.close()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


@contextlib.asynccontextmanager
async def serve(
    rules: tuple[Rule, ...], *, log: Any, tool: str, limit: int = MAX_CONNECTIONS
) -> AsyncIterator[str]:
    """A proxy for one call; yields its private directory (holding `SOCKET_NAME`) and, on the
    way out, closes it with every connection it opened."""
    # 0700: the agent's uid only; in /tmp where it can, as a long TMPDIR could take the
    # socket's path past the 107 bytes a unix socket's name may have
    directory = tempfile.mkdtemp(prefix="gnet-", dir="/tmp" if os.access("/tmp", os.W_OK) else None)
    proxy = Proxy(rules, log, tool, limit)
    server = await asyncio.start_unix_server(
        proxy.handle, os.path.join(directory, SOCKET_NAME), limit=_HEAD_LIMIT
    )
    try:
        yield directory
    finally:
        server.close()
        await proxy.close()
        await server.wait_closed()
        shutil.rmtree(directory, ignore_errors=True)
