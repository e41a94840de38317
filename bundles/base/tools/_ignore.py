"""Walk a directory the way ripgrep does: honour .gitignore/.ignore, skip hidden entries and
never follow symlinks. Used by file-system's `find` and by `search` when ripgrep is absent.

Patterns are gitignore(5), matched by `pathspec`'s GitIgnoreSpec (`#` comments, `!` negation,
a trailing `/` for directories only, a `/` elsewhere anchors the pattern at its file's
directory, `*`, `?`, `[...]`, `**`). On top of that, `{a,b}` alternatives are expanded as
ripgrep's globs do. The last matching pattern wins, deeper ignore files override shallower
ones, and a file under an ignored directory stays ignored (the directory is pruned). A line
that is no valid pattern (a lone `!`, a trailing `\\`) is skipped in an ignore file and refused
as a glob argument.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pathspec import GitIgnoreSpec

IGNORE_FILES = (".gitignore", ".ignore")
MAX_ALTERNATIVES = 64
"""`{a,b}` groups expand to at most this many patterns per line (`{a,b}{c,d}` is four)."""


class InvalidPattern(ValueError):
    """A glob that is no gitignore pattern, or whose `{...}` groups expand too far."""


def expand_braces(glob: str) -> list[str]:
    """`src/*.{py,pyi}` -> [`src/*.py`, `src/*.pyi`]; groups do not nest, `\\{` is literal."""
    out = [""]
    i = 0
    while i < len(glob):
        start = _brace_at(glob, i)
        if start < 0:
            return [prefix + glob[i:] for prefix in out]
        end = glob.find("}", start)
        options = glob[start + 1 : end].split(",")
        out = [prefix + glob[i:start] + option for prefix in out for option in options]
        if len(out) > MAX_ALTERNATIVES:
            raise InvalidPattern(f"{glob!r} expands to more than {MAX_ALTERNATIVES} patterns")
        i = end + 1
    return out


def _brace_at(glob: str, i: int) -> int:
    """The index of the next unescaped `{` that has a closing `}`, or -1."""
    while (start := glob.find("{", i)) >= 0:
        if (start == 0 or glob[start - 1] != "\\") and "}" in glob[start:]:
            return start
        i = start + 1
    return -1


def _spec(lines: Iterable[str], *, strict: bool) -> GitIgnoreSpec | None:
    """One GitIgnoreSpec of `lines`; None when no line is a pattern."""
    patterns: list[str] = []
    for line in lines:
        for pattern in expand_braces(line):
            try:
                GitIgnoreSpec.from_lines([pattern])
            except ValueError as error:
                if strict:
                    raise InvalidPattern(f"{line!r} is not a gitignore-style pattern") from error
                continue
            patterns.append(pattern)
    spec = GitIgnoreSpec.from_lines(patterns)
    return spec if spec.patterns and any(p.include is not None for p in spec.patterns) else None


def _subject(rel: str, is_dir: bool) -> str:
    return rel + "/" if is_dir else rel  # how pathspec tells a directory (for `build/`)


@dataclass(frozen=True, slots=True)
class Pattern:
    """One glob of a tool call (`find`'s pattern, `search`'s glob); `!glob` excludes."""

    spec: GitIgnoreSpec
    negate: bool

    def matches(self, rel: str, is_dir: bool = False) -> bool:
        return bool(self.spec.check_file(_subject(rel, is_dir)).include)

    def wanted(self, rel: str) -> bool:
        """Does a file pass this glob? (`!glob` keeps what it does not match.)"""
        return self.matches(rel) != self.negate


def compile_pattern(line: str) -> Pattern | None:
    """One glob, or None for blanks and comments; raises InvalidPattern for a broken one."""
    text = line.strip()
    if not text or text.startswith("#"):
        return None
    negate = text.startswith("!")
    spec = _spec([text[1:] if negate else text], strict=True)
    return Pattern(spec, negate) if spec is not None else None


@dataclass(frozen=True, slots=True)
class RuleSet:
    """The patterns of the ignore files of one directory (`base`: its path from the top)."""

    base: str
    spec: GitIgnoreSpec

    def verdict(self, rel_from_top: str, is_dir: bool) -> bool | None:
        """True: ignored, False: re-included by `!`, None: no pattern here matches."""
        if self.base:
            if not rel_from_top.startswith(self.base + "/"):
                return None
            rel_from_top = rel_from_top[len(self.base) + 1 :]
        return self.spec.check_file(_subject(rel_from_top, is_dir)).include


def load_rules(directory: Path, base: str) -> RuleSet | None:
    lines: list[str] = []
    for name in IGNORE_FILES:
        path = directory / name
        if path.is_file() and not path.is_symlink():
            lines.extend(path.read_text(encoding="utf-8", errors="replace").splitlines())
    spec = _spec(lines, strict=False) if lines else None
    return RuleSet(base, spec) if spec is not None else None


def _ignored(rules: list[RuleSet], rel: str, is_dir: bool) -> bool:
    ignored = False
    for ruleset in rules:
        verdict = ruleset.verdict(rel, is_dir)
        if verdict is not None:
            ignored = verdict
    return ignored


def walk_files(top: Path, start: Path) -> Iterator[tuple[Path, str]]:
    """Yield `(path, path relative to start)` of every searchable file under `start`.

    Ignore files are read from `top` (the workspace root) down to `start` and below, so a
    search in a subdirectory honours the root's .gitignore like ripgrep does.
    """
    rules: list[RuleSet] = []
    rel_start = os.path.relpath(start, top)
    parts = [] if rel_start == "." else Path(rel_start).parts
    for depth in range(len(parts)):  # the ancestors of start, from the top down
        base = "/".join(parts[:depth])
        if ruleset := load_rules(top.joinpath(*parts[:depth]), base):
            rules.append(ruleset)
    yield from _walk(top, start, rules)


def _keep(dirpath: str, rel_dir: str, rules: list[RuleSet], name: str, is_dir: bool) -> bool:
    rel = f"{rel_dir}/{name}" if rel_dir else name
    return not (
        name.startswith(".")
        or os.path.islink(os.path.join(dirpath, name))
        or _ignored(rules, rel, is_dir)
    )


def _walk(top: Path, start: Path, inherited: list[RuleSet]) -> Iterator[tuple[Path, str]]:
    local: dict[str, list[RuleSet]] = {}
    for dirpath, dirnames, filenames in os.walk(start, followlinks=False):
        rel_dir = Path(os.path.relpath(dirpath, top)).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir
        parent_rules = local.get(os.path.dirname(dirpath), inherited)
        own = load_rules(Path(dirpath), rel_dir)
        rules = [*parent_rules, own] if own else parent_rules
        local[dirpath] = rules

        dirnames[:] = sorted(n for n in dirnames if _keep(dirpath, rel_dir, rules, n, True))
        for name in sorted(filenames):
            if _keep(dirpath, rel_dir, rules, name, False):
                path = Path(dirpath, name)
                yield path, path.relative_to(start).as_posix()
