"""Walk a directory the way ripgrep does: honour .gitignore/.ignore, skip hidden entries and
never follow symlinks. Used by file-system's `find` and by `search` when ripgrep is absent.

Patterns follow gitignore(5): `#` comments, `!` negation, a trailing `/` for directories only, a
`/` elsewhere anchors the pattern at its file's directory, `*`, `?`, `[...]`, `**` and `{a,b}`.
The last matching pattern wins, deeper files override shallower ones, and a file under an
ignored directory stays ignored (the directory is pruned).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

IGNORE_FILES = (".gitignore", ".ignore")


def _translate_class(glob: str, i: int) -> tuple[str, int]:
    """Translate the `[...]` starting at `glob[i]`; returns (regex, index after it)."""
    end = glob.find("]", i + 2 if glob[i + 1 : i + 2] in ("!", "^") else i + 1)
    if end == -1:
        return re.escape("["), i + 1
    body = glob[i + 1 : end]
    if body.startswith("!"):
        body = "^" + body[1:]
    return "[" + body.replace("\\", "\\\\") + "]", end + 1


def _translate_star(glob: str, i: int) -> tuple[str, int]:
    if glob.startswith("**", i):
        before_ok = i == 0 or glob[i - 1] == "/"
        if before_ok and glob.startswith("**/", i):
            return "(?:.*/)?", i + 3
        if before_ok and i + 2 == len(glob):
            return ".*", i + 2
    return "[^/]*", i + 1


def glob_to_regex(glob: str) -> str:
    """Translate a gitignore-style glob (without `!` and trailing `/`) to a regex body."""
    out: list[str] = []
    i = 0
    while i < len(glob):
        char = glob[i]
        if char == "*":
            piece, i = _translate_star(glob, i)
        elif char == "?":
            piece, i = "[^/]", i + 1
        elif char == "[" and i + 1 < len(glob):
            piece, i = _translate_class(glob, i)
        elif char == "{" and "}" in glob[i:]:
            end = glob.index("}", i)
            options = glob[i + 1 : end].split(",")
            piece, i = "(?:" + "|".join(glob_to_regex(o) for o in options) + ")", end + 1
        elif char == "\\" and i + 1 < len(glob):
            piece, i = re.escape(glob[i + 1]), i + 2
        else:
            piece, i = re.escape(char), i + 1
        out.append(piece)
    return "".join(out)


@dataclass(frozen=True, slots=True)
class Pattern:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool

    def matches(self, rel: str, is_dir: bool) -> bool:
        return (is_dir or not self.dir_only) and self.regex.fullmatch(rel) is not None


def compile_pattern(line: str) -> Pattern | None:
    """One gitignore line, or None for blanks and comments."""
    text = line.rstrip("\n").rstrip("\r")
    while text.endswith(" ") and not text.endswith("\\ "):
        text = text[:-1]
    if not text or text.startswith("#"):
        return None
    negate = text.startswith("!")
    if negate or text.startswith(("\\!", "\\#")):
        text = text[1:]
    dir_only = text.endswith("/")
    text = text.rstrip("/")
    if not text:
        return None
    anchored = "/" in text
    body = glob_to_regex(text.lstrip("/"))
    prefix = "" if anchored else "(?:.*/)?"
    return Pattern(re.compile(prefix + body, re.DOTALL), negate, dir_only)


@dataclass(frozen=True, slots=True)
class RuleSet:
    """The patterns of the ignore files of one directory (`base`: its path from the top)."""

    base: str
    patterns: tuple[Pattern, ...]

    def verdict(self, rel_from_top: str, is_dir: bool) -> bool | None:
        """True: ignored, False: re-included by `!`, None: no pattern here matches."""
        if self.base:
            if not rel_from_top.startswith(self.base + "/"):
                return None
            rel_from_top = rel_from_top[len(self.base) + 1 :]
        result: bool | None = None
        for pattern in self.patterns:
            if pattern.matches(rel_from_top, is_dir):
                result = not pattern.negate
        return result


def load_rules(directory: Path, base: str) -> RuleSet | None:
    patterns: list[Pattern] = []
    for name in IGNORE_FILES:
        path = directory / name
        if path.is_file() and not path.is_symlink():
            text = path.read_text(encoding="utf-8", errors="replace")
            patterns.extend(p for line in text.splitlines() if (p := compile_pattern(line)))
    return RuleSet(base, tuple(patterns)) if patterns else None


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
