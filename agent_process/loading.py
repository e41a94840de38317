"""Load a handler/extension module named by an `entry`: a file (relative to the resource's
root) or a dotted module. Every failure becomes `EntryLoadError` with the file and the cause."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
from pathlib import Path
from types import ModuleType

from bundles import codecache


class EntryLoadError(Exception):
    pass


def is_path_entry(entry: str) -> bool:
    return entry.endswith(".py") or "/" in entry or entry.startswith(".")


def load_entry(entry: str, root: Path) -> ModuleType:
    """Import `entry` once per process (a second load returns the same module)."""
    if not is_path_entry(entry):
        try:
            return importlib.import_module(entry)
        except Exception as exc:
            raise EntryLoadError(f"cannot import module {entry!r}: {_cause(exc)}") from exc
    path = (root / entry).resolve()
    if not path.is_file():
        raise EntryLoadError(f"entry file {path} does not exist (entry {entry!r})")
    try:
        return codecache.exec_file(module_name(path), path)
    except codecache.NotLoadable as exc:
        raise EntryLoadError(f"entry file {path} is not a loadable Python module") from exc
    except Exception as exc:
        raise EntryLoadError(f"importing {path} failed: {_cause(exc)}") from exc


def module_name(path: Path) -> str:
    """The `sys.modules` name of the entry file at `path` (resolved): a stable unique name per
    file, so modules loaded by path do not shadow each other."""
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    return f"goondan_entry_{path.stem.replace('-', '_')}_{digest}"


def _cause(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
