"""The README and the docs site stay true: the site builds with `--strict` (a broken link or
anchor fails), the README is short and its links resolve, and the CLI and YAML references name
every command, option and field the code has."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from bundles import kinds
from orchestrator import cli

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
README_MAX_LINES = 300
"""Issue 30: a README a newcomer reads in ten minutes; the manual is the site."""
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def test_the_site_builds_strict(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None:
        why = "mkdocs is not installed: make install (the dev extra has mkdocs-material)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    assert (tmp_path / "index.html").exists()
    assert (tmp_path / "ARCHITECTURE" / "index.html").exists()


def test_the_readme_is_short() -> None:
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move the detail to docs/"


def test_every_relative_link_of_the_readme_resolves() -> None:
    targets = [m["target"] for m in LINK.finditer(README.read_text())]
    local = [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:", t) and t[0] != "#"]
    assert local, "the README links to the docs"
    missing = [t for t in local if not (REPO / t).exists()]
    assert not missing


def commands(
    parser: argparse.ArgumentParser, words: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], list[str]]]:
    """Every command path of the CLI (`goondan calls resolve`) with its option strings."""
    options = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
    yield words, options
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*words, name))


COMMON = ("--help", "--state-root", "--swarm")
"""Options every command has: the page names them once."""


def test_the_cli_reference_names_every_command_and_option() -> None:
    # a synopsis line continues on the indented lines after it
    page = re.sub(r"\n {4,}", " ", (DOCS / "reference" / "cli.md").read_text())
    parser = cli.build_parser(cli.all_commands())
    missing: list[str] = []
    for words, options in commands(parser, ("goondan",)):
        lines = [line for line in page.splitlines() if " ".join(words) in line]
        if not lines:
            missing.append(" ".join(words))
            continue
        named = " ".join(lines)
        missing += [f"{' '.join(words)} {o}" for o in options if o not in COMMON and o not in named]
    missing += [o for o in COMMON if o not in page]
    assert not missing, "docs/reference/cli.md does not name these"


def struct_in(annotation: object) -> type[msgspec.Struct] | None:
    """The Struct a field holds (in an Optional, a union with a string form, or a list)."""
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        return annotation
    if typing.get_origin(annotation) in (list, typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = struct_in(arg)
            if found is not None and found.__name__ not in ("ObjectRef", "RefItem", "ValueSource"):
                return found
    return None


def field_paths(struct: type[msgspec.Struct], prefix: str) -> Iterator[str]:
    hints = typing.get_type_hints(struct, globalns=vars(kinds))
    for f in msgspec.structs.fields(struct):
        path = prefix + f.encode_name
        yield path
        inner = struct_in(hints[f.name])
        if inner is not None:
            is_list = typing.get_origin(hints[f.name]) is list
            yield from field_paths(inner, path + ("[]." if is_list else "."))


def test_the_yaml_reference_names_every_field_of_every_kind() -> None:
    page = (DOCS / "reference" / "yaml.md").read_text()
    sections = dict(re.findall(r"^### (\w+)\n(.*?)(?=^#|\Z)", page, re.S | re.M))
    missing = [
        f"{kind.value} {path}"
        for kind, spec in kinds.SPEC_TYPES.items()
        for path in field_paths(spec, "spec.")
        if f"`{path}`" not in sections.get(kind.value, "")
    ]
    assert not missing, "docs/reference/yaml.md does not name these fields"
