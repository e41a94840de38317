"""Resource and tool names (ARCHITECTURE.md §6): what the model sees is `<resource>__<export>`.

Pure functions, no I/O. A name matches `^[A-Za-z][A-Za-z0-9_-]*$` and never contains `__` (the
separator), and a tool's full name is at most 64 characters, which every major provider
accepts. Package names may be npm-style scoped (`@goondan/base`).
"""

from __future__ import annotations

import re

NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
PACKAGE_NAME_PATTERN = re.compile(r"^(@[a-z0-9][a-z0-9._-]*/)?[A-Za-z0-9][A-Za-z0-9._-]*$")
SEPARATOR = "__"
MAX_TOOL_NAME = 64
MAX_NAME = 128


def name_problem(name: object) -> str | None:
    """Why `name` is not a valid resource or export name, or None when it is."""
    if not isinstance(name, str) or not name:
        return "a name must be a non-empty string"
    if len(name) > MAX_NAME:
        return f"name is longer than {MAX_NAME} characters"
    if not NAME_PATTERN.match(name):
        return (
            f"name {name!r} must start with a letter and contain only letters, digits, '-' and '_'"
        )
    if SEPARATOR in name:
        return f"name {name!r} must not contain {SEPARATOR!r} (it separates resource and export)"
    return None


def package_name_problem(name: object) -> str | None:
    if not isinstance(name, str) or not PACKAGE_NAME_PATTERN.match(name):
        return f"package name {name!r} must look like `name` or `@scope/name`"
    return None


def tool_full_name(resource: str, export: str) -> str:
    return f"{resource}{SEPARATOR}{export}"


def split_tool_name(full: str) -> tuple[str, str]:
    """`bash__exec` -> (`bash`, `exec`); split on the first `__` (ARCHITECTURE.md §6)."""
    resource, sep, export = full.partition(SEPARATOR)
    if not sep or not resource or not export:
        raise ValueError(f"{full!r} is not a `<resource>__<export>` tool name")
    return resource, export


def tool_name_problem(resource: str, export: str) -> str | None:
    full = tool_full_name(resource, export)
    if len(full) > MAX_TOOL_NAME:
        return (
            f"tool name {full!r} is {len(full)} characters, over the {MAX_TOOL_NAME} that model "
            "providers accept"
        )
    return None
