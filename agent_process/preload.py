"""The bundle the fork server already holds, reused by its children while it is current.

Loading and validating a bundle costs tens of milliseconds (YAML, refs, the base package);
a forked child would pay that on every spawn. The fork server is a fork of the daemon, which
loaded the bundle before forking it, so it hands that object to `remember()`; a child takes
it only if no file it came from has changed since (restart after an edit re-reads).
After a reload the daemon asks the fork server to `refresh()` it. What the fork server builds
for the bundle beyond holding it is `agent_process.forkprep`'s.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bundles.loader import bundle_files, load_bundle
from bundles.model import Bundle
from protocol.launch import LaunchSettings

Fingerprint = tuple[tuple[str, int, int], ...]
Input = str | Path
"""A bundle, env file or state root path: a child has the launch's strings."""


def _files(bundle: Bundle, env_files: tuple[Path, ...], state_root: Path) -> set[Path]:
    files = set(bundle_files(bundle.path))
    files.update(res.location.file for res in bundle.resources)
    files.update(env_files)
    for name in (".env", ".env.local"):
        files.add(bundle.root / name)
    secrets = state_root / "secrets"
    if secrets.is_dir():
        files.update(secrets.iterdir())
    return files


def fingerprint(files: tuple[str, ...]) -> Fingerprint:
    """(path, mtime, size) of each file, in the given (sorted) order; -1s for a missing one."""
    out = []
    for path in files:
        try:
            st = os.stat(path)
        except OSError:
            out.append((path, -1, -1))
            continue
        out.append((path, st.st_mtime_ns, st.st_size))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Preloaded:
    """Everything a child compares is computed here, in the fork server, as strings: a child
    that touched the shared Path objects (resolve, sort, compare) would write caches onto them
    and copy their pages, which is most of what an idle agent's memory is made of."""

    bundle: Bundle
    launch: LaunchSettings
    """What the daemon starts its children with: their env files and state root are these
    very strings."""
    files: tuple[str, ...]
    """Sorted: the order of `stamp`."""
    stamp: Fingerprint
    bundle_paths: tuple[str, ...]
    """The bundle file and directory as given; a child's equal string needs no resolve()."""

    @classmethod
    def of(cls, bundle: Bundle, launch: LaunchSettings) -> Preloaded:
        env_files, state_root = tuple(map(Path, launch.env_files)), Path(launch.state_root)
        files = tuple(sorted(map(str, _files(bundle, env_files, state_root))))
        bundle_paths = (str(bundle.path), str(bundle.root))
        return cls(bundle, launch, files, fingerprint(files), bundle_paths)

    def matches(self, path: Input, env_files: Sequence[Input], state_root: Input) -> bool:
        state = self.launch.state_root
        same_inputs = (
            tuple(map(str, env_files)) == self.launch.env_files
            and self._same_bundle(path)
            and (str(state_root) == state or _same_file(state_root, state))
        )
        return same_inputs and fingerprint(self.files) == self.stamp

    def _same_bundle(self, path: Input) -> bool:
        if str(path) in self.bundle_paths:  # what the orchestrator passes: no resolve needed
            return True
        return Path(path).resolve() in (self.bundle.path.resolve(), self.bundle.root.resolve())


def _same_file(a: Input, b: Input) -> bool:
    return Path(a).resolve() == Path(b).resolve()


_held: list[Preloaded] = []
"""Set once in the fork server (before it forks anyone); read by its children."""


def remember(bundle: Bundle, launch: LaunchSettings) -> None:
    _held[:] = [Preloaded.of(bundle, launch)]


def refresh() -> Preloaded | None:
    """Load the held bundle again from the same inputs if any of its files changed (the fork
    server runs this when the daemon reloaded the bundle); an invalid bundle is dropped, so
    children load (and report) it themselves. Returns the newly held bundle, if any."""
    for held in list(_held):
        launch = held.launch
        if held.matches(held.bundle.path, launch.env_files, launch.state_root):
            continue
        _held.clear()
        bundle = _load(held.bundle.path, launch)
        remember(bundle, launch)
        return _held[0]
    return None


def take(path: Input, env_files: Sequence[Input], state_root: Input) -> Bundle | None:
    """The remembered bundle if it was loaded from these inputs and is still current."""
    for held in _held:
        if held.matches(path, env_files, state_root):
            return held.bundle
    return None


def child_bundle(settings: LaunchSettings) -> Bundle:
    """A child's bundle: the remembered one while it is current, else loaded from its files
    (raises BundleError)."""
    held = take(settings.bundle, settings.env_files, settings.state_root)
    return held if held is not None else _load(Path(settings.bundle), settings)


def _load(path: Path, launch: LaunchSettings) -> Bundle:
    env_files = tuple(map(Path, launch.env_files))
    return load_bundle(path, env_files=env_files, state_root=Path(launch.state_root))
