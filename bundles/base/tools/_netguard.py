"""SSRF guard for http-fetch: which addresses a URL may reach, decided after DNS resolution.

Refused: loopback, private, link-local, multicast, reserved, unspecified, shared (CGNAT) and
every other non-global address, the cloud metadata endpoints, and IPv6 forms that embed such an
IPv4 address (mapped, 6to4, Teredo, NAT64). A host resolving to several addresses is refused if
any of them is refused, so a mixed DNS answer cannot smuggle an internal address in. The
`allowHosts` setting opens exact host names, IP addresses or CIDR networks (tests use it for a
server on 127.0.0.1).

The caller connects to the address returned here (not to the name again), which closes the
window in which a DNS answer could change between the check and the connection.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from bundles.sdk import ToolFailed
from protocol.errors import ErrorCode

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean
        "169.254.170.2",  # AWS ECS task metadata
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
    )
)
METADATA_HOSTS = frozenset(
    {"metadata.google.internal", "metadata", "instance-data", "instance-data.ec2.internal"}
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
ALLOWED_SCHEMES = ("http", "https")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def blocked_reason(ip: IPAddress) -> str | None:
    """Why a connection to `ip` is refused, or None when it is a public address."""
    if isinstance(ip, ipaddress.IPv6Address) and (inner := _embedded_ipv4(ip)) is not None:
        reason = blocked_reason(inner)
        return f"{reason} (embedded in {ip})" if reason else None
    checks = (
        (ip in METADATA_ADDRESSES, "cloud metadata"),
        (ip.is_loopback, "loopback"),
        (ip.is_unspecified, "unspecified"),
        (ip.is_link_local, "link-local"),
        (ip.is_multicast, "multicast"),
        (ip.is_reserved, "reserved"),
        (ip.is_private, "private"),
        (not ip.is_global, "not globally routable"),
    )
    return next((reason for hit, reason in checks if hit), None)


@dataclass(frozen=True, slots=True)
class AllowList:
    """The `allowHosts` setting: exact host names and IP networks that skip the guard."""

    hosts: frozenset[str]
    networks: tuple[Network, ...]

    @classmethod
    def parse(cls, entries: Iterable[object]) -> AllowList:
        hosts: set[str] = set()
        networks: list[Network] = []
        for entry in entries:
            if not isinstance(entry, str) or not entry:
                raise ToolFailed(f"Tool config 'allowHosts' has a bad entry {entry!r}")
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                hosts.add(entry.lower().rstrip("."))
        return cls(frozenset(hosts), tuple(networks))

    def allows_host(self, host: str) -> bool:
        return host.lower().rstrip(".") in self.hosts

    def allows_ip(self, ip: IPAddress) -> bool:
        return any(ip.version == net.version and ip in net for net in self.networks)


def _blocked(host: str, detail: str) -> ToolFailed:
    return ToolFailed(
        f"refusing to connect to {host}: {detail}",
        code=ErrorCode.E_TOOL_SSRF_BLOCKED,
        suggestion="Only public http(s) addresses are reachable; an operator can open a host "
        "with the Tool's config 'allowHosts'.",
    )


async def _resolve(host: str, port: int) -> list[IPAddress]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass  # a name, not a literal address: resolve it below
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        raise ToolFailed(
            f"cannot resolve host {host!r}: {error}", code=ErrorCode.E_TOOL_HTTP
        ) from None
    found: list[IPAddress] = []
    for *_, sockaddr in infos:
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
        if ip not in found:
            found.append(ip)
    return found


async def vet(host: str, port: int, allow: AllowList) -> IPAddress:
    """The address to connect to for `host`, or `E_TOOL_SSRF_BLOCKED` (IPv4 preferred)."""
    host_allowed = allow.allows_host(host)
    if host.lower().rstrip(".") in METADATA_HOSTS and not host_allowed:
        raise _blocked(host, "cloud metadata host")
    addresses = await _resolve(host, port)
    if not addresses:
        raise ToolFailed(f"host {host!r} has no address", code=ErrorCode.E_TOOL_HTTP)
    for ip in addresses:
        reason = None if host_allowed or allow.allows_ip(ip) else blocked_reason(ip)
        if reason is not None:
            shown = host if host == str(ip) else f"{host} ({ip})"
            raise _blocked(shown, f"{reason} address")
    return sorted(addresses, key=lambda ip: ip.version)[0]
