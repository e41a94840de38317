"""Recordings on disk: one JSON file per request hash, `DIR/<sha256>.json`.

Written atomically (a private temporary file in DIR, then a rename), so agent processes
recording into one DIR at once never leave a half-written file: two that record the same
request write the same name and the last rename wins. Read with suspicion: the DIR is often a
checkout of someone's commit, so a file that is not a regular file (a symlink out of DIR, a
FIFO), is over MAX_BYTES, is not JSON or has the wrong types is E_REPLAY_INVALID, never a crash.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import msgspec

from agent_process.models.base import ModelError, ModelResponse
from protocol.errors import ErrorCode

MAX_BYTES = 8 << 20
"""A recorded response is a model's reply: far smaller than this."""

FORMAT = 1


class StoredError(msgspec.Struct, kw_only=True):
    """The provider's failure, replayed as the same ModelError: a fallback chain falls back
    under replay as it did when recorded (models/fallback.py)."""

    code: str
    message: str
    status: int | None = None


class Stored(msgspec.Struct, kw_only=True, forbid_unknown_fields=False):
    """Exactly one of `response` and `error`."""

    format: int
    key: str
    response: ModelResponse | None = None
    error: StoredError | None = None
    chunks: list[str] | None = None
    """The streamed pieces of the text as the provider sent them (None: not streamed)."""
    agent: str = ""
    request: dict[str, Any] = msgspec.field(default_factory=dict)
    """The normalized request (replay_key.normalized), for a person diffing a miss."""


class Missing(Exception):
    """No recording under this key."""


def path_of(root: Path, key: str) -> Path:
    return root / f"{key}.json"


def read(root: Path, key: str) -> Stored:
    """The recording of `key`; raises Missing, or ModelError E_REPLAY_INVALID."""
    path = path_of(root, key)
    try:
        # O_NOFOLLOW: a symlink is refused, not followed out of DIR; O_NONBLOCK: a FIFO
        # opens at once (and is refused below) instead of blocking the agent.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Missing(str(path)) from None
    except OSError as exc:
        why = "a symlink" if exc.errno == errno.ELOOP else os.strerror(exc.errno or 0)
        raise invalid(path, why) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # before fdopen, which refuses a directory
        os.close(fd)
        raise invalid(path, "not a regular file")
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise invalid(path, f"over {MAX_BYTES} bytes")
    try:
        stored = msgspec.json.decode(data, type=Stored)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise invalid(path, str(exc)[:300]) from None
    _check(path, key, stored)
    return stored


def _check(path: Path, key: str, stored: Stored) -> None:
    if stored.format != FORMAT:
        raise invalid(path, f"format {stored.format}, this goondan reads format {FORMAT}")
    if stored.key != key:
        raise invalid(path, f"it records request {stored.key[:64]!r}, not {key}")
    if (stored.response is None) == (stored.error is None):
        raise invalid(path, "it needs exactly one of `response` and `error`")
    if stored.error is not None and not stored.error.code.startswith("E_MODEL_"):
        # a recorded failure is a provider's: nothing else is replayed as one
        raise invalid(path, f"error code {stored.error.code[:64]!r} is not an E_MODEL_* code")
    usage = stored.response.usage if stored.response is not None else None
    if usage and min(usage.input_tokens, usage.output_tokens, usage.cached_input_tokens) < 0:
        raise invalid(path, "negative token counts")


def invalid(path: Path, why: str) -> ModelError:
    return ModelError(
        ErrorCode.E_REPLAY_INVALID,
        f"recording {path} is not valid: {why}",
        suggestion="delete it and record again (goondan eval --record DIR)",
    )


def write(root: Path, stored: Stored) -> Path:
    """Write `stored` as `root/<key>.json` atomically; raises ModelError E_RECORD_FAILED."""
    path = path_of(root, stored.key)
    tmp: str | None = None
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".rec-", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(msgspec.json.format(msgspec.json.encode(stored), indent=2) + b"\n")
        # os.replace renames over a symlink itself: nothing outside DIR is written
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise ModelError(
            ErrorCode.E_RECORD_FAILED,
            f"cannot write the recording {path}: {exc.strerror or exc}",
            suggestion="check that the recording directory is writable",
        ) from None
    return path
