"""YAML reading: real YAML features work, lines are exact, hostile input ends in coded errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundles.documents import (
    FIX_CHARACTER,
    FIX_DEPTH,
    FIX_DUPLICATE,
    FIX_KEY,
    FIX_MERGE,
    FIX_SIZE,
    FIX_SYNTAX,
    FIX_TAG,
    MAX_DEPTH,
    YamlFileError,
    parse_documents,
)
from bundles.loader import inspect_bundle, load_bundle
from bundles.naming import name_problem, split_tool_name, tool_full_name, tool_name_problem
from protocol.errors import ErrorCode
from tests.unit.bundles.conftest import VALID_TAIL, write_bundle

E = ErrorCode


def test_yaml_features_and_lines() -> None:
    text = """\
# a comment
defaults: &defaults
  retries: 3
  tags: [a, b]
item:
  <<: *defaults
  retries: 5
  text: |
    line one
    line two
  folded: >
    folded
    text
---
---
second: true
"""
    first, second = parse_documents(text, "f.yaml")
    assert first.data["item"] == {
        "retries": 5,
        "tags": ["a", "b"],
        "text": "line one\nline two\n",
        "folded": "folded text\n",
    }
    assert first.lines[("item", "retries")] == 7
    assert first.lines[("defaults", "tags", 1)] == 4
    assert first.line_of(("item", "text", "deeper")) == 8
    assert (second.index, second.line, second.data) == (2, 16, {"second": True})


def _billion_laughs(levels: int) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        refs = ",".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "path", "suggestion"),
    [
        (_billion_laughs(9), "goondan.yaml:1", FIX_SIZE),
        ("a: &a [*a]\n", "goondan.yaml:1", FIX_DEPTH),
        ("a: &a {b: *a}\n", "goondan.yaml:1", FIX_DEPTH),
        ("[" * 5000 + "]" * 5000, "goondan.yaml:1", FIX_DEPTH),
        ("x: 1\ny: " + "[" * 5000, "goondan.yaml:2", FIX_DEPTH),
        ("a:\n" + "".join(f"{'  ' * (i + 1)}k{i}:\n" for i in range(2000)), "goondan.yaml:65",
         FIX_DEPTH),
        ("- " * 3000 + "x\n", "goondan.yaml:1", FIX_DEPTH),
        ("a: 1\na: 2\n", "goondan.yaml:2", FIX_DUPLICATE),
        ("a: !!python/object/apply:os.system [echo hi]\n", "goondan.yaml:1", FIX_TAG),
        ("a: !!python/name:os.system\n", "goondan.yaml:1", FIX_TAG),
        ("? [1, 2]\n: x\n", "goondan.yaml:1", FIX_KEY),
        ("a: b: c\n", "goondan.yaml:1", FIX_SYNTAX),
        ("ok: 1\nx: \x00\n", "goondan.yaml:2", FIX_CHARACTER),
        ("a: !!set {x}\n", "goondan.yaml:1", FIX_TAG),
        ("a:\n  <<: 5\n", "goondan.yaml:2", FIX_MERGE),
    ],
    ids=["billion-laughs", "self-seq", "self-map", "deep", "deep-unclosed", "deep-block",
         "deep-block-seq", "dup", "python-tag", "python-name", "complex-key", "syntax", "nul",
         "set", "bad-merge"],
)  # fmt: skip
def test_hostile_yaml_is_a_coded_parse_error(text: str, path: str, suggestion: str) -> None:
    """Our code, the file and line, and our suggestion, whichever layer (ours, PyYAML or
    libyaml, each with limits of its own) refused the text first."""
    with pytest.raises(YamlFileError) as info:
        parse_documents(text, "goondan.yaml")
    diagnostic = info.value.diagnostic
    assert (diagnostic.code, diagnostic.path, diagnostic.suggestion) == (
        E.E_CONFIG_PARSE_ERROR,
        path,
        suggestion,
    )


def test_depth_limit_is_the_documented_one() -> None:
    ok = "a:" + "".join(f"\n{'  ' * (i + 1)}k{i}:" for i in range(MAX_DEPTH - 2)) + " 1\n"
    assert parse_documents(ok, "f.yaml")


def test_invalid_utf8_file(tmp_path: Path) -> None:
    (tmp_path / "goondan.yaml").write_bytes(b"a: \xff\xfe\n")
    report = inspect_bundle(tmp_path, packages=[])
    assert [(d.code, d.path) for d in report.errors] == [(E.E_CONFIG_PARSE_ERROR, "goondan.yaml")]


def test_split_files_are_loaded_and_others_ignored(tmp_path: Path) -> None:
    head, _, rest = VALID_TAIL.partition("---\n")
    write_bundle(tmp_path, head, name="models.yml")
    write_bundle(tmp_path, rest, name="goondan.yaml")
    write_bundle(tmp_path, "not: [a bundle\n", name="docker-compose.yaml")
    bundle = load_bundle(tmp_path / "goondan.yaml", packages=[])
    assert sorted(r.key for r in bundle.resources) == ["Agent/main", "Model/fake", "Swarm/s"]
    assert bundle.model("fake").location.file.name == "models.yml"


def test_error_in_split_file_names_it(tmp_path: Path) -> None:
    write_bundle(tmp_path, VALID_TAIL)
    write_bundle(
        tmp_path,
        "apiVersion: goondan.ai/v1\nkind: Tool\nmetadata: {name: t}\nspec: {entry: 3}\n",
        name="tools.yaml",
    )
    report = inspect_bundle(tmp_path, packages=[])
    assert [(d.code, d.path) for d in report.errors] == [
        (E.E_CONFIG_SCHEMA_INVALID, "tools.yaml:4 spec.entry")
    ]


def test_package_document_only_first_in_main_file(tmp_path: Path) -> None:
    write_bundle(
        tmp_path,
        "apiVersion: goondan.ai/v1\nkind: Package\nmetadata: {name: '@me/pkg'}\n---\n" + VALID_TAIL,
    )
    assert load_bundle(tmp_path, packages=[]).package() is not None
    write_bundle(
        tmp_path,
        "apiVersion: goondan.ai/v1\nkind: Package\nmetadata: {name: p}\n",
        name="resources.yaml",
    )
    report = inspect_bundle(tmp_path, packages=[])
    assert [(d.code, d.path) for d in report.errors] == [
        (E.E_CONFIG_PACKAGE_DOC_POSITION, "resources.yaml:2 kind")
    ]


@pytest.mark.parametrize(
    ("doc", "code", "path"),
    [
        ("- just\n- a list\n", E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:25"),
        ("apiVersion: goondan.ai/v1\nkind: Model\nmetadata: {name: m}\nstatus: {}\n",
         E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:28 status"),
        ("kind: Model\nmetadata: {name: m}\n", E.E_CONFIG_UNSUPPORTED_API_VERSION,
         "goondan.yaml:25 apiVersion"),
        ("apiVersion: goondan.ai/v1\nmetadata: {name: m}\n", E.E_CONFIG_UNKNOWN_KIND,
         "goondan.yaml:25 kind"),
        ("apiVersion: goondan.ai/v1\nkind: Model\nmetadata: {}\n", E.E_CONFIG_SCHEMA_INVALID,
         "goondan.yaml:27 metadata"),
    ],
)  # fmt: skip
def test_envelope_errors(tmp_path: Path, doc: str, code: ErrorCode, path: str) -> None:
    write_bundle(tmp_path, VALID_TAIL + "---\n" + doc)
    report = inspect_bundle(tmp_path, packages=[])
    assert [(d.code, d.path) for d in report.errors] == [(code, path)]


def test_naming_rules() -> None:
    assert name_problem("file-system") is None
    assert name_problem("my_tool2") is None
    for bad in ("", "2fast", "has space", "a__b", "ünï", "a/b", "x" * 200):
        assert name_problem(bad) is not None
    assert tool_full_name("bash", "exec") == "bash__exec"
    assert split_tool_name("file-system__read_all") == ("file-system", "read_all")
    assert split_tool_name("a__b__c") == ("a", "b__c")
    with pytest.raises(ValueError, match="not a"):
        split_tool_name("nounderscores")
    assert tool_name_problem("a" * 30, "b" * 32) is None
    assert tool_name_problem("a" * 31, "b" * 32) is not None
