"""Resolve tool paths inside the instance workspace (or the Tool's configured roots).

Shared by `bash` and `file-system`; loaded by path with `load_sibling` (bundles/base is not a
Python package). Every path a model hands us goes through `Workspace.resolve` or
`Workspace.resolve_entry`, which refuse `..`, absolute paths and symlinks that lead outside the
roots with `E_TOOL_PATH_ESCAPE`. Paths are checked after `realpath`, so a symlink inside the
workspace that points outside is caught like a literal `../`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from bundles.sdk import ToolFailed
from protocol.errors import ErrorCode


def _escape(raw: str) -> ToolFailed:
    return ToolFailed(
        f"path {raw!r} is outside the workspace",
        code=ErrorCode.E_TOOL_PATH_ESCAPE,
        suggestion="Use a path relative to the workspace root, without '..' leaving it; "
        "symlinks that point outside the workspace are refused too.",
    )


def _is_within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class Workspace:
    """The directories a tool may touch; the first root is the base of relative paths."""

    def __init__(self, roots: Iterable[Path]) -> None:
        self.roots = [os.path.realpath(root) for root in roots]
        if not self.roots:
            raise ValueError("a workspace needs at least one root")
        self.base = self.roots[0]

    @classmethod
    def from_context(cls, workdir: Path, config: Mapping[str, Any]) -> Workspace:
        """Roots come from `config.roots` (relative ones against the workdir), else the workdir."""
        configured = config.get("roots") or ["."]
        if not isinstance(configured, list) or not all(isinstance(r, str) for r in configured):
            raise ToolFailed("Tool config 'roots' must be a list of directory paths")
        roots = [workdir / root for root in configured]
        for root in roots:
            if not root.is_dir():
                raise ToolFailed(
                    f"workspace root {root} does not exist",
                    code=ErrorCode.E_TOOL_PATH_NOT_FOUND,
                    suggestion="Fix the Tool's config 'roots' or create the directory.",
                )
        return cls(roots)

    def _candidate(self, raw: str) -> str:
        if "\x00" in raw:
            raise ToolFailed("path contains a NUL byte", code=ErrorCode.E_TOOL_INVALID_ARGS)
        return os.path.join(self.base, raw or ".")  # an absolute raw replaces the base

    def _check(self, raw: str, real: str) -> Path:
        if not any(_is_within(real, root) for root in self.roots):
            raise _escape(raw)
        return Path(real)

    def resolve(self, raw: str) -> Path:
        """The real path `raw` names, following every symlink (also the last component)."""
        return self._check(raw, os.path.realpath(self._candidate(raw)))

    def resolve_entry(self, raw: str) -> Path:
        """The directory entry `raw` names, not following a symlink in its last component.

        For delete and move: removing or renaming a symlink acts on the link itself, so the
        parent is resolved and checked and the final name is kept as it is.
        """
        candidate = os.path.normpath(self._candidate(raw))
        parent, name = os.path.split(candidate)
        if name in ("", ".", ".."):
            raise _escape(raw)
        entry = self._check(raw, os.path.join(os.path.realpath(parent), name))
        if str(entry) in self.roots:
            raise ToolFailed(
                f"{raw!r} is a workspace root",
                code=ErrorCode.E_TOOL_INVALID_ARGS,
                suggestion="Name a file or directory inside the workspace.",
            )
        return entry

    def root_of(self, path: Path) -> Path:
        """The root that holds `path` (a path returned by `resolve`)."""
        for root in self.roots:
            if _is_within(str(path), root):
                return Path(root)
        raise _escape(str(path))

    def display(self, path: Path | str) -> str:
        """How a path is shown to the model: relative to the base root, never a host path
        when it lies under the base."""
        text = str(path)
        if _is_within(text, self.base):
            rel = os.path.relpath(text, self.base)
            return "." if rel == "." else Path(rel).as_posix()
        return text
