"""Compiled code of files loaded by path (tool, extension and connector entries and their
`load_sibling` helpers), kept in memory so forked children do not compile them again.

Compiling a tool file and its helpers from source is a cost of every agent process's start
when there is no `__pycache__` (read-only bundle, `PYTHONDONTWRITEBYTECODE`; `bench_spawn_tools`
measures a spawn with the built-in tools). The fork
server `warm()`s the bundle's files once; each child's loader looks the source up by its
exact bytes, so an edited file is simply compiled again (nothing stale is ever run). The
loader never reads or writes `__pycache__`: a .pyc is trusted while the source's mtime (in
whole seconds) and size match, so a tool edited within a second of its last load, to a text of
the same length (a digit changed), ran its old code.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path
from types import CodeType, ModuleType

MAX_FILES = 512
_code: dict[tuple[str, bytes], CodeType] = {}


class _CachedSourceLoader(importlib.machinery.SourceFileLoader):
    def get_code(self, fullname: str) -> CodeType:
        path = self.get_filename(fullname)
        return self.source_to_code(self.get_data(path), path)

    def source_to_code(self, data: bytes, path: str, *, _optimize: int = -1) -> CodeType:  # type: ignore[override]
        key = (str(path), bytes(data))
        code = _code.get(key)
        if code is None:
            code = compile(data, path, "exec", dont_inherit=True, optimize=_optimize)
            _remember(key, code)
        return code


def spec_for(name: str, path: Path) -> importlib.machinery.ModuleSpec | None:
    """`spec_from_file_location` with a loader that reuses warmed code."""
    return importlib.util.spec_from_file_location(
        name, path, loader=_CachedSourceLoader(name, str(path))
    )


class NotLoadable(ImportError):
    """The file is not something Python can load as a module."""


def exec_file(name: str, path: Path) -> ModuleType:
    """Import the file `path` as the module `name`, once per process (a module already loaded
    under `name` is returned), with the fork server's compiled code when it has it. Raises
    NotLoadable for a file that is no Python module; whatever running the module raises
    propagates, and the half-run module is forgotten."""
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    spec = spec_for(name, path)
    if spec is None or spec.loader is None:
        raise NotLoadable(f"{path} is not a loadable Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it: dataclasses and typing look it up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def warm(files: Iterable[Path]) -> None:
    """Compile these Python files now (the fork server, before it forks); unreadable or
    invalid ones are skipped: the child that loads them reports the error."""
    for path in files:
        try:
            data = path.read_bytes()
            key = (str(path), data)
            if key not in _code:
                _remember(key, compile(data, str(path), "exec", dont_inherit=True))
        except (OSError, SyntaxError, ValueError):
            continue


def _remember(key: tuple[str, bytes], code: CodeType) -> None:
    if len(_code) >= MAX_FILES:
        _code.clear()
    _code[key] = code
