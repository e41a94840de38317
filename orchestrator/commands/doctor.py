"""`goondan doctor [BUNDLE] [--json] [--env-file F]`: is this machine ready to run the bundle?

Checks, each `ok`, `warn` or `fail` with how to fix it: the Python version, every dependency
(importable, with its version; libzmq with ipc support; PyYAML with libyaml), the state root
(writable, and private to its owner: a warning names paths other users can reach) and the
run/logs roots systemd may set, the ipc socket path length for the swarm, the bundle (BUNDLE,
or ./goondan.yaml when present), the API keys of its OpenAI/Anthropic Models, and, for
information, systemd and ripgrep. Secrets are never printed.
Exit 0 when nothing required failed (warnings allowed), 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from enum import StrEnum
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

from bundles import refs
from bundles.diagnostics import BundleError, Severity
from bundles.kinds import Kind, ModelSpec
from bundles.loader import MAIN_FILES, BundleReport, inspect_bundle
from bundles.model import Bundle, Resource
from bundles.values import resolve_value
from orchestrator.control.client import layout_of
from orchestrator.deepcheck import deep_check
from orchestrator.exitcodes import EXIT_OK, EXIT_RUNTIME
from orchestrator.ingress.journal import JournalError
from orchestrator.ingress.journal import sqlite as journal_sqlite
from orchestrator.observe import statecheck
from protocol.endpoints import StateLayout
from protocol.errors import ProtocolError
from protocol.private import private_dir

MIN_PYTHON = (3, 11)
KEY_PROVIDERS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
"""Providers that need an API key, and the variable the templates read it from."""
_SHOWN_ERRORS = 5
STALE_PENDING_SECONDS = 3600.0
"""An event accepted this long ago and not finished is worth a warning."""


class Level(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: Level
    detail: str
    fix: str | None = None


@dataclass(frozen=True, slots=True)
class Dependency:
    module: str
    dist: str
    needed_for: str | None = None
    """None: the daemon cannot start without it. Otherwise the feature (provider) needing it."""


DEPENDENCIES = (
    Dependency("zmq", "pyzmq"),
    Dependency("msgspec", "msgspec"),
    Dependency("yaml", "PyYAML"),
    Dependency("uvloop", "uvloop"),
    Dependency("structlog", "structlog"),
    Dependency("jsonschema", "jsonschema"),
    Dependency("httpx", "httpx"),
    Dependency("openai", "openai", needed_for="openai"),
    Dependency("anthropic", "anthropic", needed_for="anthropic"),
    Dependency("mcp", "mcp", needed_for="mcp"),
)


@dataclass(slots=True)
class Context:
    layout: StateLayout
    bundle_path: Path | None
    env_files: list[Path]
    swarm: str | None
    report: BundleReport | None = None

    @property
    def bundle(self) -> Bundle | None:
        return self.report.bundle if self.report is not None else None


def check_python(version: tuple[int, ...] | None = None) -> Check:
    version = version if version is not None else tuple(sys.version_info[:3])
    shown = ".".join(map(str, version))
    if version[:2] >= MIN_PYTHON:
        return Check("python", Level.OK, f"{shown} ({sys.executable})")
    need = ".".join(map(str, MIN_PYTHON))
    return Check("python", Level.FAIL, f"{shown} is too old", f"install Python >= {need}")


def _features(bundle: Bundle | None) -> set[str]:
    """What the bundle uses that needs an optional dependency: providers and MCP."""
    if bundle is None:
        return set()
    used = {str(m.spec.provider) for m in bundle.of_kind(Kind.MODEL)}
    kinds = (Kind.TOOL, Kind.EXTENSION)
    if any(getattr(r.spec, "mcp", None) is not None for k in kinds for r in bundle.of_kind(k)):
        used.add("mcp")
    return used


def _extra(module: ModuleType) -> tuple[Level, str, str | None]:
    """What beyond importability matters: libzmq's ipc transport, PyYAML's libyaml."""
    if module.__name__ == "zmq":
        libzmq = module.zmq_version()
        if not module.has("ipc"):
            return Level.FAIL, f"libzmq {libzmq} has no ipc transport", "use Linux or macOS"
        return Level.OK, f"libzmq {libzmq}", None
    if module.__name__ == "yaml":
        if getattr(module, "__with_libyaml__", False):
            return Level.OK, "with libyaml", None
        fix = "install libyaml (apt install libyaml-dev) and reinstall PyYAML"
        return Level.WARN, "without libyaml: bundles load about 8x slower", fix
    return Level.OK, "", None


def check_dependency(dep: Dependency, features: set[str]) -> Check:
    """A dependency the bundle needs is imported (it must load, native parts included); one it
    does not use is only looked up: importing the model SDKs and mcp took ~3 s of a doctor
    run, for providers the bundle never calls."""
    needed = dep.needed_for is None or dep.needed_for in features
    fix = f"pip install '{dep.dist}' in the environment of {sys.executable}"
    if not needed:
        return _installed(dep, fix)
    try:
        module = importlib.import_module(dep.module)
    except (ImportError, OSError) as exc:
        why = "required" if dep.needed_for is None else f"needed for {dep.needed_for}"
        return Check(dep.dist, Level.FAIL, f"cannot import {dep.module} ({why}): {exc}", fix)
    level, extra, extra_fix = _extra(module)
    version = _version(dep, module)
    return Check(dep.dist, level, f"{version}" + (f" ({extra})" if extra else ""), extra_fix)


def _installed(dep: Dependency, fix: str) -> Check:
    """An optional dependency this bundle does not use: installed or not, without its import."""
    try:
        found = importlib.util.find_spec(dep.module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return Check(dep.dist, Level.WARN, f"not installed (needed for {dep.needed_for})", fix)
    unused = f"not loaded: no bundle checked here uses {dep.needed_for}"
    return Check(dep.dist, Level.OK, f"{_version(dep, None)} ({unused})")


def _version(dep: Dependency, module: ModuleType | None) -> str:
    try:
        return metadata.version(dep.dist)
    except metadata.PackageNotFoundError:  # a module's own __version__ is the fallback only
        return str(getattr(module, "__version__", "unknown version"))


def _writable(directory: Path) -> str | None:
    """None when a file can be created in `directory` (made if missing), else why not."""
    try:
        private_dir(directory)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".doctor-"):
            pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def check_directories(layout: StateLayout) -> Iterator[Check]:
    roots = [("state root", layout.root, "--state-root DIR or GOONDAN_STATE_ROOT")]
    if layout.run_root is not None:
        roots.append(("run root", layout.run_root, "RUNTIME_DIRECTORY"))
    if layout.logs_root is not None:
        roots.append(("logs root", layout.logs_root, "LOGS_DIRECTORY"))
    for name, path, how in roots:
        problem = _writable(path)
        if problem is None:
            yield Check(name, Level.OK, f"{path} is writable")
        else:
            fix = f"fix its permissions, or choose another directory ({how})"
            yield Check(name, Level.FAIL, f"{path} is not writable: {problem}", fix)


def check_state_privacy(layout: StateLayout) -> Iterator[Check]:
    """Warn about state other users can reach: it holds conversations, logs and secrets."""
    found = statecheck.scan(layout.root, layout.secrets_dir)
    if found.readable_secrets:
        shown = ", ".join(str(p) for p in found.readable_secrets[:_SHOWN_ERRORS])
        fix = f"chmod 600 {layout.secrets_dir}/*.json"
        yield Check("secrets", Level.WARN, f"readable by other users: {shown}", fix)
    if found.loose:
        shown = ", ".join(str(p) for p in found.loose[:_SHOWN_ERRORS])
        more = len(found.loose) - _SHOWN_ERRORS
        detail = f"{len(found.loose)} path(s) open to group/others: {shown}"
        detail += f" and {more} more" if more > 0 else ""
        fix = f"chmod -R go-rwx {layout.root}"
        yield Check("state privacy", Level.WARN, detail, fix)
    elif found.complete:
        yield Check("state privacy", Level.OK, f"everything under {layout.root} is private")


def check_journal(ctx: Context) -> Check:
    """The ingress journal of the swarm: its size and its oldest unfinished event."""
    swarm = ctx.swarm or (ctx.bundle.swarm().name if ctx.bundle is not None else None)
    if swarm is None:
        return Check("journal", Level.OK, "no swarm to look at: skipped")
    path = ctx.layout.journal_file(swarm)
    try:
        found = journal_sqlite.describe(path, time.time())
    except JournalError as exc:
        return Check("journal", Level.FAIL, f"{exc.code}: {exc.message}", exc.suggestion)
    if found is None:
        return Check("journal", Level.OK, f"{path} does not exist yet (created at first run)")
    age = found["oldestOpenAgeSeconds"]
    detail = (f"{path}: {found['bytes']} bytes, {found['open']} unfinished event(s)"
              + (f", the oldest accepted {age:.0f} s ago" if age is not None else ""))  # fmt: skip
    if found["quarantined"]:
        fix = (
            f"read them in the quarantine table of {path} (sqlite3); each was logged "
            "journal_row_quarantined (E_JOURNAL_CORRUPT_ROW): who else writes this file?"
        )
        detail += f", {found['quarantined']} row(s) quarantined (they did not decode)"
        return Check("journal", Level.WARN, detail, fix)
    if age is not None and age > STALE_PENDING_SECONDS:
        fix = "start the daemon (it delivers them), or see goondan status for the instance"
        return Check("journal", Level.WARN, detail, fix)
    return Check("journal", Level.OK, detail)


def check_ipc_path(ctx: Context) -> Check:
    swarm = ctx.swarm or "x" * 16  # no bundle: a typical swarm name
    paths = ctx.layout.run_paths(swarm)
    try:
        paths.agents_endpoint  # noqa: B018 - the property raises when the path is too long
        paths.control_endpoint  # noqa: B018
    except ProtocolError as exc:
        return Check("ipc path", Level.FAIL, f"{exc.code}: {exc.message}", "a shorter state root")
    longest = len(os.fsencode(paths.control_sock))
    return Check("ipc path", Level.OK, f"{paths.control_sock} ({longest} of 107 bytes)")


def _bundle_file(args: argparse.Namespace) -> Path | None:
    if args.bundle is not None:
        return Path(args.bundle)
    return next((Path(n) for n in MAIN_FILES if Path(n).is_file()), None)


def check_bundle(ctx: Context) -> Iterator[Check]:
    if ctx.bundle_path is None:
        yield Check("bundle", Level.OK, "no BUNDLE and no ./goondan.yaml: skipped")
        return
    ctx.report = report = inspect_bundle(
        ctx.bundle_path, env_files=ctx.env_files, state_root=ctx.layout.root
    )
    if report.bundle is None:
        shown = "; ".join(str(d) for d in report.errors[:_SHOWN_ERRORS])
        more = len(report.errors) - _SHOWN_ERRORS
        detail = f"{len(report.errors)} error(s): {shown}" + (f"; {more} more" if more > 0 else "")
        yield Check("bundle", Level.FAIL, detail, f"goondan validate {ctx.bundle_path}")
        return
    try:
        swarm = report.bundle.swarm(ctx.swarm).name
    except (KeyError, BundleError):
        yield Check("bundle", Level.FAIL, f"no swarm named {ctx.swarm!r}", "check --swarm")
        return
    ctx.swarm = swarm
    found = deep_check(report.bundle.path, env_files=ctx.env_files, swarm=swarm,
                       state_root=ctx.layout.root)  # fmt: skip
    for diag in found:
        level = Level.FAIL if diag.severity is Severity.ERROR else Level.WARN
        yield Check("bundle", level, f"{diag.path}: {diag.code} {diag.message}", diag.suggestion)
    if not any(d.severity is Severity.ERROR for d in found):
        yield Check("bundle", Level.OK, f"{report.bundle.path} is valid (swarm {swarm})")
    for warning in report.warnings:
        detail = f"{warning.path}: {warning.code} {warning.message}"
        yield Check("bundle", Level.WARN, detail, warning.suggestion)


def _models(bundle: Bundle) -> list[Resource[ModelSpec]]:
    found: dict[object, Resource[ModelSpec]] = {}
    for agent in bundle.of_kind(Kind.AGENT, user_only=True):
        try:
            model = refs.resolve_model(bundle, agent)
        except BundleError:
            continue
        found.setdefault(model.key, model)
    return list(found.values())


def check_api_key(bundle: Bundle, model: Resource[ModelSpec], state_root: Path) -> Check:
    spec, name = model.spec, f"Model/{model.name}"
    env = KEY_PROVIDERS[spec.provider]
    if spec.api_key is None:
        if spec.endpoint is not None:
            return Check(
                name, Level.WARN, f"no apiKey for {spec.endpoint}", "fine if it needs none"
            )
        fix = f"add `apiKey: {{valueFrom: {{env: {env}}}}}` and set {env} in .env"
        return Check(name, Level.FAIL, f"{spec.provider} model without apiKey", fix)
    try:
        value = resolve_value(bundle, spec.api_key, state_root=state_root)
    except BundleError as exc:
        diag = exc.diagnostics[0]
        return Check(name, Level.FAIL, f"apiKey: {diag.message}", diag.suggestion)
    if not value.strip():
        return Check(name, Level.FAIL, "apiKey is empty", f"set {env} (e.g. in .env)")
    return Check(name, Level.OK, f"{spec.provider} apiKey is set ({len(value)} characters)")


def check_api_keys(ctx: Context) -> Iterator[Check]:
    bundle = ctx.bundle
    if bundle is None:
        return
    for model in _models(bundle):
        if model.spec.provider in KEY_PROVIDERS:
            yield check_api_key(bundle, model, ctx.layout.root)


def check_tools() -> Iterator[Check]:
    """Informational: what is on this host that goondan can use."""
    if os.environ.get("NOTIFY_SOCKET"):
        yield Check("systemd", Level.OK, "running under systemd (NOTIFY_SOCKET is set)")
    elif Path("/run/systemd/system").is_dir():
        yield Check("systemd", Level.OK, "available: `goondan service print-unit` writes a unit")
    else:
        yield Check("systemd", Level.OK, "not the init system here (only needed as a service)")
    rg = shutil.which("rg")
    if rg is not None:
        yield Check("ripgrep", Level.OK, f"{rg} (file-system search uses it)")
    else:
        fix = "install ripgrep (apt install ripgrep) for fast file-system search"
        yield Check("ripgrep", Level.WARN, "not on PATH: search falls back to Python", fix)


def run_checks(ctx: Context) -> list[Check]:
    checks = [check_python()]
    checks += check_directories(ctx.layout)
    checks += check_state_privacy(ctx.layout)
    checks += check_bundle(ctx)  # first: it names the swarm the ipc check needs
    features = _features(ctx.bundle)
    checks += [check_dependency(dep, features) for dep in DEPENDENCIES]
    checks.append(check_ipc_path(ctx))
    checks.append(check_journal(ctx))
    checks += check_api_keys(ctx)
    checks += check_tools()
    return _one_verdict_per_bundle(checks)


def _one_verdict_per_bundle(checks: list[Check]) -> list[Check]:
    """A bundle its Models cannot run is not "valid": no `ok` beside a `fail` for it."""
    failing = [c.name for c in checks if c.name.startswith("Model/") and c.status is Level.FAIL]
    if not failing:
        return checks
    verdict = f"loads, but cannot run: {', '.join(failing)} failed (below)"
    return [
        Check("bundle", Level.FAIL, verdict, c.fix)
        if c.name == "bundle" and c.status is Level.OK  # Models are only checked with a bundle
        else c
        for c in checks
    ]


def _print_human(checks: list[Check]) -> None:
    width = max(len(c.name) for c in checks)
    for c in checks:
        print(f"{c.status.value:<5} {c.name:<{width}}  {c.detail}")
        if c.fix and c.status is not Level.OK:
            print(f"{'':<5} {'':<{width}}  fix: {c.fix}")
    counts = {level: sum(c.status is level for c in checks) for level in Level}
    print(", ".join(f"{n} {level.value}" for level, n in counts.items()))


class _Doctor:
    name = "doctor"

    def configure(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("bundle", nargs="?", default=None, metavar="BUNDLE")
        parser.add_argument("--json", action="store_true", help="print the checks as JSON")
        parser.add_argument("--env-file", action="append", default=[], metavar="F")

    def run(self, args: argparse.Namespace) -> int:
        ctx = Context(
            layout=layout_of(args),
            bundle_path=_bundle_file(args),
            env_files=[Path(f) for f in args.env_file],
            swarm=getattr(args, "swarm", None),
        )
        checks = run_checks(ctx)
        failed = any(c.status is Level.FAIL for c in checks)
        if args.json:
            rows: list[dict[str, Any]] = [asdict(c) for c in checks]
            print(json.dumps({"ok": not failed, "checks": rows}, indent=2, ensure_ascii=False))
        else:
            _print_human(checks)
        return EXIT_RUNTIME if failed else EXIT_OK


COMMAND = _Doctor()
