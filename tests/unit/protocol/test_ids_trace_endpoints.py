from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.endpoints import (
    IPC_PATH_LIMIT,
    SEGMENT_MAX,
    StateLayout,
    ipc_endpoint,
    path_segment,
)
from protocol.errors import ErrorCode, ProtocolError
from protocol.ids import (
    MAX_INSTANCE_KEY_BYTES,
    ProcessKind,
    check_instance_key,
    parse_address,
    parse_process_id,
)
from protocol.trace import (
    format_traceparent,
    is_span_id,
    is_trace_id,
    new_span_id,
    new_trace_id,
    parse_traceparent,
)


@pytest.mark.parametrize(
    ("text", "kind", "name", "key", "gen"),
    [
        ("agent:coder:default:0", ProcessKind.AGENT, "coder", "default", 0),
        ("agent:coder:telegram:12345:7", ProcessKind.AGENT, "coder", "telegram:12345", 7),
        ("connector:webhook:main:12", ProcessKind.CONNECTOR, "webhook", "main", 12),
    ],
)
def test_process_id_round_trip(text: str, kind: ProcessKind, name: str, key: str, gen: int) -> None:
    pid = parse_process_id(text)
    assert (pid.kind, pid.name, pid.instance_key, pid.generation) == (kind, name, key, gen)
    assert str(pid) == text
    assert parse_process_id(text.encode()) == pid
    assert str(pid.address) == text.rsplit(":", 1)[0]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "agent",
        "agent:coder",
        "agent:coder:key",  # no generation
        "agent:coder:key:x",
        "robot:coder:key:1",
        "agent:1bad:key:1",
        "agent:coder::1",
        "agent:coder:" + "k" * 200 + ":1",
        "agent:coder:a\x00b:1",
    ],
)
def test_bad_process_ids(text: str) -> None:
    with pytest.raises(ProtocolError):
        parse_process_id(text)


def test_bad_utf8_process_id() -> None:
    with pytest.raises(ProtocolError):
        parse_process_id(b"\xff\xfe")


def test_address_parse() -> None:
    addr = parse_address("agent:worker:k:1")
    assert addr.instance_key == "k:1"
    assert str(addr.with_generation(4)) == "agent:worker:k:1:4"


def test_trace_ids_are_w3c() -> None:
    t, s = new_trace_id(), new_span_id()
    assert is_trace_id(t) and len(t) == 32
    assert is_span_id(s) and len(s) == 16
    assert not is_trace_id("0" * 32)
    assert not is_trace_id("ABC")
    assert parse_traceparent(format_traceparent(t, s)) == (t, s)
    with pytest.raises(ProtocolError):
        parse_traceparent("01-xyz")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("default", "default"),
        ("telegram:42", "telegram%3A42"),
        ("../../etc", "..%2F..%2Fetc"),
        ("..", "%2E%2E"),
        (".", "%2E"),
        ("a/b", "a%2Fb"),
        ("한", "%ED%95%9C"),
        ("100%", "100%25"),
    ],
)
def test_path_segment_is_one_safe_segment(raw: str, expected: str) -> None:
    seg = path_segment(raw)
    assert seg == expected
    assert "/" not in seg and seg not in (".", "..")


def test_instance_paths_stay_under_root(tmp_path: Path) -> None:
    layout = StateLayout(root=tmp_path)
    paths = layout.instance_paths("swarm", "../../../../etc", "agent")
    assert paths.root.resolve().is_relative_to(tmp_path.resolve())
    assert paths.base_jsonl.name == "base.jsonl"


def test_ipc_path_limit_names_the_state_root(tmp_path: Path) -> None:
    root = tmp_path / ("x" * 120)
    layout = StateLayout(root=root)
    with pytest.raises(ProtocolError) as info:
        _ = layout.run_paths("swarm").agents_endpoint
    assert info.value.code is ErrorCode.E_ENDPOINT_TOO_LONG
    assert str(root) in info.value.message
    assert "--state-root" in info.value.message
    short = tmp_path / "s.sock"
    assert ipc_endpoint(short, tmp_path) == f"ipc://{short}"
    assert IPC_PATH_LIMIT == 107


def test_exactly_at_limit_is_accepted(tmp_path: Path) -> None:
    path = Path("/" + "a" * (IPC_PATH_LIMIT - 1))
    assert ipc_endpoint(path, tmp_path).startswith("ipc://")
    with pytest.raises(ProtocolError):
        ipc_endpoint(Path("/" + "a" * IPC_PATH_LIMIT), tmp_path)


@pytest.mark.parametrize(
    "key",
    ["/" * MAX_INSTANCE_KEY_BYTES, "é" * (MAX_INSTANCE_KEY_BYTES // 2), "%" * 128, "a" * 128],
    ids=["slashes", "accents", "percents", "plain"],
)
def test_a_long_key_escapes_to_a_name_the_file_system_takes(tmp_path: Path, key: str) -> None:
    """Found by the attack review: a legal 128-byte key escaped to 384 bytes (over the 255 a
    file name may have) and the agent crash-looped on `File name too long`."""
    check_instance_key(key)
    seg = path_segment(key)
    assert len(seg.encode()) <= SEGMENT_MAX
    layout = StateLayout(root=tmp_path)
    paths = layout.instance_paths("swarm", key, "agent")
    paths.messages_dir.mkdir(parents=True)
    layout.logs_dir("swarm").mkdir(parents=True)
    layout.process_log("swarm", "a" * 60, key).write_text("ok")
    assert seg.startswith(path_segment(key[:10])[:10])  # a readable prefix


@given(st.text(min_size=1, max_size=200), st.text(min_size=1, max_size=200))
def test_distinct_keys_never_share_a_name(a: str, b: str) -> None:
    if a != b:
        assert path_segment(a) != path_segment(b)
    assert len(path_segment(a)) <= SEGMENT_MAX and "/" not in path_segment(a)


def test_a_shortened_name_never_equals_a_plain_one() -> None:
    long_key = "x" * 200
    short = path_segment(long_key)
    assert "~" in short
    assert path_segment(short) != short  # `~` is escaped in a plain name


@given(st.text(alphabet="ab.-_%~/Z9\n é", max_size=SEGMENT_MAX + 5))
def test_path_segment_matches_the_walk_over_each_character(text: str) -> None:
    """A plain name skips the escaping walk: the result is the walk's, at the length bound too."""
    walked = "".join(
        ch if ch.isascii() and (ch.isalnum() or ch in "_.-") else
        "".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
        for ch in text
    )  # fmt: skip
    if walked in ("", ".", "..") or len(walked) > SEGMENT_MAX:
        return  # escaped or shortened: the cases above
    assert path_segment(text) == walked


def test_a_plain_name_at_the_bound_is_kept_and_one_past_it_is_shortened() -> None:
    assert path_segment("k" * SEGMENT_MAX) == "k" * SEGMENT_MAX
    assert "~" in path_segment("k" * (SEGMENT_MAX + 1))


def test_an_instance_s_paths_are_made_once_and_never_shared_with_another(tmp_path: Path) -> None:
    first = StateLayout(root=tmp_path).instance_paths("s", "k", "a")
    assert StateLayout(root=tmp_path).instance_paths("s", "k", "a") is first
    other = StateLayout(root=tmp_path).instance_paths("s", "k2", "a")
    assert other.root == tmp_path / "instances" / "s" / "k2" / "a" != first.root
    assert StateLayout(root=tmp_path / "x").instance_paths("s", "k", "a").root != first.root
