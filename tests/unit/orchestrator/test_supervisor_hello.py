"""`hello` negotiates the protocol: the version a child says is kept on its entry (only a child
of STREAM_PROTOCOL or later is sent `delta` frames); one the daemon cannot serve is a coded
start error."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.messages import MIN_PROTOCOL_VERSION, PROTOCOL_VERSION, HelloPayload
from tests.unit.orchestrator.conftest import Routed
from tests.unit.orchestrator.test_supervisor_restart import supervisor


def hello(version: int) -> HelloPayload:
    return HelloPayload(pid=1, kind="agent", name="a", instance_key="k", generation=1,
                        protocol_version=version)  # fmt: skip


@pytest.mark.parametrize("version", range(MIN_PROTOCOL_VERSION, PROTOCOL_VERSION + 1))
async def test_every_version_it_reads_is_served_and_kept(
    routed: Routed, tmp_path: Path, version: int
) -> None:
    sup = supervisor(routed, tmp_path)
    sup.on_hello(routed.entry, hello(version))
    assert routed.entry.start_error is None and routed.entry.protocol == version


@pytest.mark.parametrize("version", [0, PROTOCOL_VERSION + 1])
async def test_a_version_it_cannot_read_is_a_coded_start_error(
    routed: Routed, tmp_path: Path, version: int
) -> None:
    sup = supervisor(routed, tmp_path)
    sup.on_hello(routed.entry, hello(version))
    error = routed.entry.start_error
    assert error is not None and error.code == "E_PROTOCOL_VERSION"
    assert f"protocol {version}" in error.message
