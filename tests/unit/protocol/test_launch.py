"""A child's launch: what the spawner encodes is what the child decodes; anything else is one
clear ProtocolError (the child prints it and exits 2)."""

from __future__ import annotations

import pytest

from protocol.errors import ProtocolError
from protocol.ids import parse_process_id
from protocol.launch import ChildLaunch, LaunchSettings, decode_launch, encode_launch

SETTINGS = LaunchSettings(
    endpoint="ipc:///r/agents.sock", swarm="s", bundle="/b/goondan.yaml", state_root="/st",
    env_files=("/b/.env", "/b/.env.local"), heartbeat_interval=0.5, log_format="console",
)  # fmt: skip


def test_a_launch_round_trips_with_an_instance_key_holding_colons() -> None:
    launch = ChildLaunch(
        process=parse_process_id("agent:coder:telegram:42:7"), settings=SETTINGS, parent_pid=12
    )
    back = decode_launch(encode_launch(launch))
    assert back == launch
    assert (back.process.instance_key, back.process.generation) == ("telegram:42", 7)
    assert str(back.process) == "agent:coder:telegram:42:7"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "{}",  # no process, no settings
        '{"process": {"kind": "agent", "name": "a", "instance_key": "k", "generation": 1}}',
        encode_launch(
            ChildLaunch(process=parse_process_id("agent:a:k:1"), settings=SETTINGS)
        ).replace('"console"', '"xml"'),  # a log format the child does not know
        encode_launch(
            ChildLaunch(process=parse_process_id("agent:a:k:1"), settings=SETTINGS)
        ).replace('"name":"a"', '"name":"a b"'),  # not a resource name
        encode_launch(
            ChildLaunch(process=parse_process_id("agent:a:k:1"), settings=SETTINGS)
        ).replace('"instance_key":"k"', '"instance_key":"k\\u0007"'),  # a control character
    ],
)
def test_a_bad_launch_is_one_protocol_error(text: str) -> None:
    with pytest.raises(ProtocolError):
        decode_launch(text)


def test_fields_a_newer_daemon_adds_are_ignored() -> None:
    text = encode_launch(ChildLaunch(process=parse_process_id("agent:a:k:1"), settings=SETTINGS))
    launch = decode_launch(text[:-1] + ',"later":true}')
    assert launch.settings == SETTINGS
