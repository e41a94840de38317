"""`.env` files: `KEY=VALUE` lines read next to the bundle and from `--env-file`.

The format is the common subset of dotenv: blank lines and `#` comments are skipped, an
optional `export ` prefix is accepted, values may be single-quoted (taken literally),
double-quoted (with `\\n`, `\\t`, `\\"` and `\\\\` escapes) or bare (a ` #` starts a comment).
No variable interpolation: what is written is what is used.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from bundles.diagnostics import Collector, format_location
from protocol.errors import ErrorCode

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "$": "$"}
MAX_ENV_FILE_BYTES = 1024 * 1024

DEFAULT_ENV_FILES = (".env", ".env.local")
"""Read in this order from the bundle directory; a later file overrides an earlier one."""


class EnvSyntaxError(ValueError):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def _double_quoted(raw: str, line: int) -> tuple[str, str]:
    """Body of a double-quoted value starting at raw[0], and the text after the quote."""
    out: list[str] = []
    i = 1
    while i < len(raw):
        ch = raw[i]
        if ch == "\\" and i + 1 < len(raw):
            out.append(_ESCAPES.get(raw[i + 1], "\\" + raw[i + 1]))
            i += 2
            continue
        if ch == '"':
            return "".join(out), raw[i + 1 :]
        out.append(ch)
        i += 1
    raise EnvSyntaxError(line, 'unterminated " quote')


def _value(raw: str, line: int) -> str:
    raw = raw.strip()
    if raw.startswith('"'):
        value, rest = _double_quoted(raw, line)
    elif raw.startswith("'"):
        end = raw.find("'", 1)
        if end < 0:
            raise EnvSyntaxError(line, "unterminated ' quote")
        value, rest = raw[1:end], raw[end + 1 :]
    else:
        comment = re.search(r"\s#", raw)
        return (raw[: comment.start()] if comment else raw).strip()
    rest = rest.strip()
    if rest and not rest.startswith("#"):
        raise EnvSyntaxError(line, "unexpected text after the closing quote")
    return value


def parse_env(text: str) -> dict[str, str]:
    """Parse dotenv text; raises `EnvSyntaxError` (with the 1-based line) on a bad line."""
    env: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("export "):
            stripped = stripped[len("export ") :].lstrip()
        key, sep, rest = stripped.partition("=")
        key = key.strip()
        if not sep or not _KEY.match(key):
            raise EnvSyntaxError(number, f"expected KEY=VALUE, got {stripped[:40]!r}")
        env[key] = _value(rest, number)
    return env


def load_env_files(
    root: Path,
    extra: Sequence[Path],
    collector: Collector,
    *,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """`.env`, `.env.local` (if present) then every `--env-file`, later files winning.

    Keys already set in the process environment are dropped: the environment always wins, so
    `FOO=x goondan run` does what it says. A named `--env-file` that is missing is an error;
    the two default files are optional.
    """
    environ = os.environ if environ is None else environ
    merged: dict[str, str] = {}
    files = [(root / name, False) for name in DEFAULT_ENV_FILES] + [(Path(p), True) for p in extra]
    for file, required in files:
        if not file.is_file():
            if required:
                collector.error(
                    ErrorCode.E_CONFIG_NOT_FOUND,
                    "env file not found",
                    str(file),
                    "check the --env-file path",
                )
            continue
        try:
            text = file.read_bytes()[:MAX_ENV_FILE_BYTES].decode("utf-8-sig", errors="replace")
            merged.update(parse_env(text))
        except EnvSyntaxError as exc:
            collector.error(
                ErrorCode.E_CONFIG_PARSE_ERROR,
                f"invalid env file line: {exc.message}",
                format_location(str(file), exc.line),
                "write one KEY=VALUE per line",
            )
        except OSError as exc:
            collector.error(ErrorCode.E_CONFIG_NOT_FOUND, f"cannot read: {exc.strerror}", str(file))
    return {k: v for k, v in merged.items() if k not in environ}
