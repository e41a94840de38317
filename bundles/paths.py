"""Files a bundle points at (tool entries, systemRef, script files) stay inside the bundle.

A path is relative to the resource's root; absolute paths, `..` segments and symlinks that
lead outside the root are refused, so a bundle cannot make the daemon load or read arbitrary
files. An entry may instead be a dotted Python module name (`mypkg.tools`), looked up in the
bundle root and then on `sys.path` without importing anything.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import sys
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from protocol.errors import ErrorCode

_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class PathProblem(Exception):
    def __init__(self, code: ErrorCode, message: str, suggestion: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.suggestion = suggestion


def is_module_name(entry: str) -> bool:
    """`mypkg.tools` is a module; `./tools.py`, `tools/bash.py` and `tool.py` are files."""
    return bool(_MODULE.match(entry)) and not entry.endswith(".py")


def file_inside(root: Path, relative: str, *, what: str = "file") -> Path:
    """The resolved file `relative` under `root`; `PathProblem` if it escapes or is missing."""
    if not relative or "\x00" in relative:
        raise PathProblem(ErrorCode.E_CONFIG_SCHEMA_INVALID, f"{what} path is empty or invalid")
    if PurePosixPath(relative).is_absolute() or PureWindowsPath(relative).is_absolute():
        raise PathProblem(
            ErrorCode.E_CONFIG_PATH_ESCAPE,
            f"{what} {relative!r} is an absolute path",
            "write the path relative to the bundle directory (e.g. ./tools/my_tool.py)",
        )
    if ".." in PurePosixPath(relative.replace("\\", "/")).parts:
        raise PathProblem(
            ErrorCode.E_CONFIG_PATH_ESCAPE,
            f"{what} {relative!r} uses '..' to leave the bundle directory",
            "move the file inside the bundle directory and point at it from there",
        )
    try:
        real_root = root.resolve()
        target = (root / relative).resolve()
    except (OSError, RuntimeError) as exc:
        raise PathProblem(
            ErrorCode.E_CONFIG_ENTRY_NOT_FOUND, f"{what} {relative!r}: {exc}"
        ) from exc
    if not target.is_relative_to(real_root):
        raise PathProblem(
            ErrorCode.E_CONFIG_PATH_ESCAPE,
            f"{what} {relative!r} resolves to {target}, outside the bundle directory {real_root} "
            "(through a symlink)",
            "copy the file into the bundle instead of linking to it",
        )
    if not target.is_file():
        raise PathProblem(
            ErrorCode.E_CONFIG_ENTRY_NOT_FOUND,
            f"{what} {relative!r} does not exist (looked for {target})",
            "create the file or fix the path (it is relative to the bundle directory)",
        )
    return target


def module_exists(name: str, root: Path) -> bool:
    """Whether module `name` can be found in `root` or on sys.path, importing nothing.

    `importlib.util.find_spec("a.b")` would import package `a`; walking the parents' search
    locations with `PathFinder` finds the spec without running any module code.
    """
    head, *rest = name.split(".")
    spec: Any = importlib.machinery.PathFinder.find_spec(head, [str(root), *sys.path])
    if spec is None:
        try:
            spec = importlib.util.find_spec(head)
        except (ImportError, ValueError):
            return False
    for part in rest:
        locations = getattr(spec, "submodule_search_locations", None) if spec else None
        if not locations:
            return False
        spec = importlib.machinery.PathFinder.find_spec(part, list(locations))
    return spec is not None


def entry_target(root: Path, entry: str) -> Path | str:
    """A Python file (resolved `Path`) or a module name (`str`); `PathProblem` when missing."""
    if is_module_name(entry):
        if not module_exists(entry, root):
            raise PathProblem(
                ErrorCode.E_CONFIG_ENTRY_NOT_FOUND,
                f"entry module {entry!r} was not found in the bundle directory or on sys.path",
                "install the package, or point entry at a .py file (e.g. ./tools/my_tool.py)",
            )
        return entry
    return file_inside(root, entry, what="entry")
