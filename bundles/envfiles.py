"""`.env` files: `KEY=VALUE` lines read next to the bundle and from `--env-file`.

Parsed by python-dotenv's parser (`dotenv.parser.parse_stream`): blank lines and `#` comments
are skipped, an optional `export ` prefix is accepted, values may be single-quoted (taken
literally), double-quoted (with `\\n`, `\\t`, `\\"` and `\\\\` escapes; may span lines) or
bare (a ` #` starts a comment). No variable interpolation: what is written is what is used. Our
rules on top: a key is an environment variable name, every line needs its `=`, and a line that
does not parse is a coded error at its line (python-dotenv itself only warns and skips it).
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from dotenv.parser import Original, parse_stream

from bundles.diagnostics import Collector, format_location
from protocol.errors import ErrorCode

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
MAX_ENV_FILE_BYTES = 1024 * 1024

DEFAULT_ENV_FILES = (".env", ".env.local")
"""Read in this order from the bundle directory; a later file overrides an earlier one."""


class EnvSyntaxError(ValueError):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def _start(original: Original) -> tuple[int, str]:
    """The 1-based line where a binding's own text starts (python-dotenv counts the blank
    lines before it as its own), and that text."""
    text = original.string.lstrip()
    skipped = original.string[: len(original.string) - len(text)]
    return original.line + skipped.count("\n"), text.splitlines()[0] if text else ""


def parse_env(text: str) -> dict[str, str]:
    """Parse dotenv text; raises `EnvSyntaxError` (with the 1-based line) on a bad line."""
    env: dict[str, str] = {}
    for binding in parse_stream(io.StringIO(text)):
        if not binding.error and binding.key is None:
            continue  # a blank line or a comment
        line, shown = _start(binding.original)
        if binding.error:
            raise EnvSyntaxError(
                line, f"cannot parse {shown[:40]!r} (an unclosed quote, or text after one?)"
            )
        if binding.value is None or binding.key is None or not _KEY.match(binding.key):
            raise EnvSyntaxError(line, f"expected KEY=VALUE, got {shown[:40]!r}")
        env[binding.key] = binding.value
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
