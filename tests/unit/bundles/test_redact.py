"""Secrets (resolved ValueSource values) are masked in log fields, text streams and JSON lines."""

from __future__ import annotations

import io
from collections.abc import Iterator

import msgspec
import pytest
import structlog

from bundles import redact

KEY = "sk-test-0123456789abcdef"


@pytest.fixture(autouse=True)
def no_secrets_after() -> Iterator[None]:
    yield
    redact.install(())


def test_text_masks_every_occurrence_longest_first() -> None:
    masker = redact.Redactor([KEY, KEY[:8], "abc"])
    assert masker.text(f"key={KEY} prefix={KEY[:8]}!") == "key=*** prefix=***!"
    assert masker.text("abc stays: shorter than MIN_SECRET_LEN") == (
        "abc stays: shorter than MIN_SECRET_LEN"
    )


def test_empty_set_is_the_identity() -> None:
    masker = redact.Redactor()
    assert not masker
    value = {"a": [KEY]}
    assert masker.value(value) is value
    assert masker.json_bytes(KEY.encode()) == KEY.encode()


def test_value_walks_nested_structures_and_keeps_non_strings() -> None:
    masker = redact.Redactor([KEY])
    got = masker.value({"args": {"token": KEY, "n": 3}, "list": [KEY, None, (KEY,)]})
    assert got == {"args": {"token": "***", "n": 3}, "list": ["***", None, ["***"]]}


def test_json_bytes_masks_escaped_forms() -> None:
    secret = 'pa"ss\\wörd'
    masker = redact.Redactor([secret])
    line = msgspec.json.encode({"result": f"got {secret}", "raw": secret})
    masked = masker.json_bytes(line)
    assert msgspec.json.decode(masked) == {"result": "got ***", "raw": "***"}


def test_structlog_processor_uses_the_installed_set() -> None:
    event = {"event": f"calling with {KEY}", "pid": 7, "exception": f"Traceback: {KEY}"}
    assert redact.processor(None, "info", dict(event)) == event  # nothing installed yet
    redact.install([KEY])
    assert redact.processor(None, "info", dict(event)) == {
        "event": "calling with ***",
        "pid": 7,
        "exception": "Traceback: ***",
    }


def test_processor_in_a_structlog_chain() -> None:
    out = io.StringIO()
    redact.install([KEY])
    logger = structlog.wrap_logger(
        structlog.PrintLogger(out),
        processors=[redact.processor, structlog.processors.JSONRenderer()],
    )
    logger.info("tool_args", args={"apiKey": KEY})
    assert KEY not in out.getvalue()
    assert '"apiKey": "***"' in out.getvalue()


def test_redacting_stream_masks_print_and_delegates_the_rest() -> None:
    target = io.StringIO()
    stream = redact.RedactingStream(target)
    redact.install([KEY])
    print(f"echo {KEY}", file=stream)
    stream.flush()
    assert target.getvalue() == "echo ***\n"
    assert stream.closed is False


@pytest.mark.parametrize(
    ("data", "limit", "expected"),
    [
        (b"abc" + KEY.encode() + b"tail", 3, b"abc"),  # the secret begins at the cut: not kept
        (b"abc" + KEY.encode() + b"tail", 4, b"abc***"),  # it begins before: masked whole
        (b"abc" + KEY.encode() + b"tail", 100, b"abc***tail"),
        (b"plain text", 5, b"plain"),
    ],
)
def test_head_never_keeps_a_prefix_of_a_secret(data: bytes, limit: int, expected: bytes) -> None:
    masker = redact.Redactor([KEY])
    assert masker.longest == len(KEY)
    assert masker.head(data, limit) == expected
    assert redact.Redactor().head(data, limit) == data[:limit]
