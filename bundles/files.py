"""Which files a loaded bundle is made of, for watch mode and selective restarts (ARCHITECTURE.md
§5): a changed file maps to the resources it defines or serves, and only their processes restart."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import msgspec

from bundles.envfiles import DEFAULT_ENV_FILES
from bundles.kinds import Kind, ScriptedOptions
from bundles.model import Bundle, Resource
from bundles.paths import PathProblem, entry_target, file_inside


def _maybe(root: Path, relative: str | None, *, entry: bool = False) -> list[Path]:
    if not relative:
        return []
    try:
        target = entry_target(root, relative) if entry else file_inside(root, relative)
    except PathProblem:
        return []
    return [target] if isinstance(target, Path) else []


def resource_files(res: Resource[Any]) -> list[Path]:
    """The YAML file that defines `res`, plus its entry, systemRef or scriptFile if it has one."""
    files = [res.location.file]
    spec = res.spec
    if res.kind in (Kind.TOOL, Kind.EXTENSION, Kind.CONNECTOR):
        files += _maybe(res.root, spec.entry, entry=True)
    elif res.kind is Kind.AGENT:
        files += _maybe(res.root, spec.prompt.system_ref)
    elif res.kind is Kind.MODEL and spec.provider == "scripted":
        try:
            options = msgspec.convert(spec.options, ScriptedOptions)
        except msgspec.ValidationError:
            return files
        files += _maybe(res.root, options.script_file)
    return files


def watched_paths(bundle: Bundle) -> list[Path]:
    """Every file of the user's bundle worth watching: YAML, .env files, entries, prompts."""
    out: dict[Path, None] = {bundle.path: None}
    for name in DEFAULT_ENV_FILES:
        out[bundle.root / name] = None
    for res in bundle.resources:
        if res.package is None:
            out.update(dict.fromkeys(resource_files(res)))
    return list(out)


def fingerprint(res: Resource[Any]) -> str:
    """A digest of the resource's document (after overrides) and its files' contents."""
    digest = hashlib.sha256(msgspec.json.encode(res.raw, order="sorted"))
    for file in resource_files(res)[1:]:
        try:
            digest.update(file.read_bytes())
        except OSError:
            digest.update(b"<missing>")
    return digest.hexdigest()
