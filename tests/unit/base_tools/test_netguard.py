"""The SSRF address policy of http-fetch, checked without any network traffic."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest

from bundles.sdk import ToolFailed

from .conftest import load_tool

guard = load_tool("tools/http_fetch.py")._netguard  # the helper as http_fetch loaded it


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("127.255.0.9", "loopback"),
        ("::1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("fd12::1", "private"),
        ("169.254.169.254", "cloud metadata"),
        ("169.254.170.2", "cloud metadata"),
        ("fd00:ec2::254", "cloud metadata"),
        ("100.100.100.200", "cloud metadata"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("224.0.0.251", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("100.64.0.1", "not globally routable"),
        ("::ffff:127.0.0.1", "loopback (embedded in {ip})"),
        ("::ffff:169.254.169.254", "cloud metadata (embedded in {ip})"),
        ("2002:0a00:0001::", "private (embedded in {ip})"),
        ("64:ff9b::a00:1", "private (embedded in {ip})"),
    ],
)
def test_internal_addresses_are_blocked(address: str, reason: str) -> None:
    ip = ipaddress.ip_address(address)
    # `{ip}` is the stdlib's own spelling of the address, which differs between Pythons.
    assert guard.blocked_reason(ip) == reason.format(ip=ip)


@pytest.mark.parametrize("address", ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111"])
def test_public_addresses_pass(address: str) -> None:
    assert guard.blocked_reason(ipaddress.ip_address(address)) is None


async def vet(host: str, allow: list[str] | None = None) -> object:
    async with asyncio.timeout(10):
        return await guard.vet(host, 80, guard.AllowList.parse(allow or []))


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "169.254.169.254", "localhost", "2130706433", "0x7f.1", "::1"]
)
async def test_vet_blocks_literals_and_names_that_resolve_inside(host: str) -> None:
    with pytest.raises(ToolFailed) as info:
        await vet(host)
    assert info.value.code == "E_TOOL_SSRF_BLOCKED"


async def test_vet_blocks_metadata_host_names_before_resolving() -> None:
    with pytest.raises(ToolFailed) as info:
        await vet("metadata.google.internal")
    assert info.value.code == "E_TOOL_SSRF_BLOCKED"
    assert "metadata" in info.value.message


async def test_allow_list_opens_exact_hosts_ips_and_networks() -> None:
    assert str(await vet("127.0.0.1", ["127.0.0.1"])) == "127.0.0.1"
    assert str(await vet("127.0.0.5", ["127.0.0.0/8"])) == "127.0.0.5"
    assert str(await vet("localhost", ["localhost"])) == "127.0.0.1"  # IPv4 preferred
    with pytest.raises(ToolFailed):
        await vet("127.0.0.2", ["127.0.0.1"])
    with pytest.raises(ToolFailed):
        await vet("localhost", ["127.0.0.2"])  # the name is not opened, its address neither


def test_allow_list_rejects_bad_entries() -> None:
    with pytest.raises(ToolFailed):
        guard.AllowList.parse([""])
    with pytest.raises(ToolFailed):
        guard.AllowList.parse([42])
