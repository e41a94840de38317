"""How the CLI finds its daemon without msgspec (orchestrator/control/locate.py): the files a
daemon writes are read back as it wrote them, and a file that is not one (hand-edited, cut
short, hostile) means no daemon there, never a crash; send's requests are the control Structs'
wire shape, as msgspec decodes them."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import msgspec
import pytest

from orchestrator.cli import build_parser
from orchestrator.commands import send
from orchestrator.control import client, locate, rundir, runpointer
from protocol.control import Attach, ControlRequest, OrchestratorInfo, SendText
from protocol.endpoints import StateLayout
from protocol.error_codes import ErrorCode


def _write(layout: StateLayout, swarm: str, pid: int) -> OrchestratorInfo:
    paths = layout.run_paths(swarm)
    paths.run_dir.mkdir(parents=True)
    info = OrchestratorInfo(pid=pid, swarm=swarm, bundle="b.yaml", started_at="now",
                            version="0.1.0", state_root=str(layout.root),
                            endpoints={"control": f"ipc://{paths.control_sock}"})  # fmt: skip
    rundir.write_active(paths, info)
    return info


def _args(root: Path, *argv: str) -> argparse.Namespace:
    return argparse.Namespace(state_root=str(root), swarm=None, **dict.fromkeys(argv))


def test_a_daemons_active_file_reads_back_as_it_was_written(tmp_path: Path) -> None:
    layout = StateLayout.from_env(tmp_path)
    info = _write(layout, "s", os.getpid())
    plain = locate.read_active(layout.run_paths("s").active_json)
    assert plain == msgspec.to_builtins(info)
    assert rundir.read_active(layout.run_paths("s").active_json) == info
    assert client.find_daemon(_args(tmp_path)) == info
    assert locate.control_endpoint(locate.find_daemon(_args(tmp_path))) == info.endpoints["control"]


FIELDS = {"pid": 1, "swarm": "s", "bundle": "b", "startedAt": "t", "version": "v", "stateRoot": "/"}


def _active(**changes: object) -> bytes:
    return json.dumps({**FIELDS, **changes}).encode()


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"{not json",
        b"\xff\xfe",
        b"[" * 100_000,  # nested past the parser's recursion limit
        b"[]",
        _active(pid=True),
        json.dumps({"pid": 1, "swarm": "s"}).encode(),  # fields missing
        _active(endpoints={"control": 7}),
        _active(node=["a"]),
    ],
)
def test_a_file_that_is_not_an_active_file_means_no_daemon(tmp_path: Path, content: bytes) -> None:
    layout = StateLayout.from_env(tmp_path)
    layout.run_paths("s").run_dir.mkdir(parents=True)
    layout.run_paths("s").active_json.write_bytes(content)
    assert locate.read_active(layout.run_paths("s").active_json) is None
    with pytest.raises(locate.ClientError) as caught:
        locate.find_daemon(_args(tmp_path))
    assert caught.value.error.code == ErrorCode.E_DAEMON_NOT_RUNNING


def test_a_pointer_leads_to_a_run_dir_elsewhere_and_a_bad_one_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a daemon under systemd: its run dir is $RUNTIME_DIRECTORY, a pointer in the usual place
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path / "runtime"))
    service = StateLayout.from_env(tmp_path / "state")
    info = _write(service, "svc", os.getpid())
    assert runpointer.write(service, "svc") == runpointer.pointer_path(service, "svc")
    monkeypatch.delenv("RUNTIME_DIRECTORY")
    assert locate.find_daemon(_args(tmp_path / "state"))["pid"] == info.pid
    runpointer.pointer_path(service, "svc").write_text('{"runDir": 3}')
    assert runpointer.read(runpointer.pointer_path(service, "svc")) is None
    with pytest.raises(locate.ClientError):
        locate.find_daemon(_args(tmp_path / "state"))


def test_a_dead_pid_is_no_daemon_and_two_live_ones_need_swarm(tmp_path: Path) -> None:
    layout = StateLayout.from_env(tmp_path)
    _write(layout, "gone", 2**22 + 12345)  # above pid_max's default: no such process
    with pytest.raises(locate.ClientError):
        locate.find_daemon(_args(tmp_path))
    _write(layout, "a", os.getpid())
    _write(layout, "b", os.getpid())
    with pytest.raises(locate.ClientError) as caught:
        locate.find_daemon(_args(tmp_path))
    assert caught.value.error.code == ErrorCode.E_CONTROL_BAD_REQUEST
    assert caught.value.error.suggestion == "choose one with --swarm S"


SENDS = [
    ["hi"],
    ["hi", "--agent", "a", "--instance", "k", "--idempotency-key", "x", "--timeout", "2.5"],
    ["hi", "--no-wait"],
    ["--attach", "e1", "--timeout", "9"],
]


@pytest.mark.parametrize("argv", SENDS)
@pytest.mark.parametrize("stream", [False, True])
def test_sends_request_is_the_control_structs_wire_shape(argv: list[str], stream: bool) -> None:
    args = build_parser({"send": send.COMMAND}).parse_args(["send", *argv])
    text = " ".join(args.text)
    plain = send._request(args, text, stream=stream)
    decoded = msgspec.msgpack.decode(msgspec.msgpack.encode(plain), type=ControlRequest)
    timeout_ms = int(args.timeout * 1000)
    expected: ControlRequest
    if args.attach:
        expected = Attach(request_id=plain["requestId"], event_id="e1", timeout_ms=timeout_ms)
    else:
        expected = SendText(
            request_id=plain["requestId"], text=text, agent=args.agent,
            instance_key=args.instance, wait=not args.no_wait, timeout_ms=timeout_ms,
            idempotency_key=args.idempotency_key, stream=stream, announce=not args.no_wait,
        )  # fmt: skip
    assert decoded == expected
    assert len(plain["requestId"]) == 32 and int(plain["requestId"], 16) >= 0
