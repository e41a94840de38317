"""References: string/object/inline forms, selectors with overrides, packages and short refs."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundles import refs
from bundles.diagnostics import BundleError
from bundles.kinds import Kind, ObjectRef, ToolSpec
from bundles.loader import inspect_bundle, load_bundle
from bundles.model import Bundle, Resource
from bundles.resolve import RefFailure, deep_merge, parse_ref
from protocol.errors import ErrorCode
from tests.unit.bundles.conftest import write_bundle

E = ErrorCode

TOOLS = """\
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: fs
  labels: {tier: base, category: files}
spec:
  entry: ./tool.py
  errorMessageLimit: 500
  config: {root: ".", maxBytes: 100, allow: [a, b]}
  exports:
    - name: read
      parameters: {type: object, properties: {path: {type: string}}}
---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: shell
  labels: {tier: base}
spec:
  entry: ./tool.py
  exports: [{name: exec}]
---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: web
  labels: {tier: extra}
spec:
  entry: ./tool.py
  exports: [{name: fetch}]
"""


def _agent_bundle(tmp: Path, tools_yaml: str, extra: str = "") -> Path:
    (tmp / "tool.py").parent.mkdir(parents=True, exist_ok=True)
    (tmp / "tool.py").write_text("handlers = {}\n")
    write_bundle(tmp, TOOLS, name="tools.yaml")
    return write_bundle(
        tmp,
        f"""\
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: fake
spec: {{provider: scripted, model: t}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: main
spec:
  modelConfig: {{modelRef: Model/fake}}
  prompt: {{system: hi}}
  tools:
{tools_yaml}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: s
spec:
  entryAgent: Agent/main
  agents: [Agent/main]
{extra}""",
    )


def _tools(bundle: Bundle) -> list[Resource[ToolSpec]]:
    return refs.resolve_tools(bundle, bundle.agent("main"))


@pytest.mark.parametrize(
    "item",
    [
        "    - Tool/shell",
        "    - shell",
        "    - ref: Tool/shell",
        "    - ref: {kind: Tool, name: shell}",
        "    - {kind: Tool, name: shell}",
    ],
)
def test_every_reference_form(tmp_path: Path, item: str) -> None:
    bundle = load_bundle(_agent_bundle(tmp_path, item), packages=[])
    assert [t.name for t in _tools(bundle)] == ["shell"]


def test_selector_by_labels_with_overrides_deep_merges(tmp_path: Path) -> None:
    item = """\
    - selector: {kind: Tool, matchLabels: {tier: base}}
      overrides:
        spec:
          errorMessageLimit: 2000
          config: {maxBytes: 5, allow: [c], root: null}
        metadata:
          labels: {extra: "yes"}"""
    bundle = load_bundle(_agent_bundle(tmp_path, item), packages=[])
    fs, shell = _tools(bundle)
    assert (fs.name, shell.name) == ("fs", "shell")
    assert fs.spec.error_message_limit == 2000
    # objects merge, lists are replaced, null removes the key
    assert fs.spec.config == {"maxBytes": 5, "allow": ["c"]}
    assert fs.spec.exports[0].name == "read"
    assert fs.metadata.labels == {"tier": "base", "category": "files", "extra": "yes"}
    assert shell.spec.config == {"maxBytes": 5, "allow": ["c"]}
    # the bundle's own resource is untouched
    assert bundle.tool("fs").spec.error_message_limit == 500


def test_selector_by_name_and_repeats_are_dropped(tmp_path: Path) -> None:
    item = "    - selector: {name: web}\n    - Tool/web\n    - Tool/fs"
    bundle = load_bundle(_agent_bundle(tmp_path, item), packages=[])
    assert [t.name for t in _tools(bundle)] == ["web", "fs"]


def test_selector_matching_nothing(tmp_path: Path) -> None:
    item = "    - selector: {matchLabels: {tier: gold}}"
    report = inspect_bundle(_agent_bundle(tmp_path, item), packages=[])
    assert [(d.code, d.path) for d in report.errors] == [
        (E.E_CONFIG_REF_NOT_FOUND, "goondan.yaml:15 spec.tools[0].selector")
    ]


def test_selector_of_the_wrong_kind(tmp_path: Path) -> None:
    item = "    - selector: {kind: Agent}"
    report = inspect_bundle(_agent_bundle(tmp_path, item), packages=[])
    assert [(d.code, d.path) for d in report.errors] == [
        (E.E_CONFIG_INVALID_REF, "goondan.yaml:15 spec.tools[0].selector.kind")
    ]


def test_overrides_that_break_the_schema(tmp_path: Path) -> None:
    item = "    - ref: Tool/fs\n      overrides: {spec: {errorMessageLimit: lots}}"
    report = inspect_bundle(_agent_bundle(tmp_path, item), packages=[])
    assert [(d.code, d.path) for d in report.errors] == [
        (E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:16 spec.tools[0].overrides")
    ]


def test_overrides_may_not_rename(tmp_path: Path) -> None:
    item = "    - ref: Tool/fs\n      overrides: {kind: Agent}"
    report = inspect_bundle(_agent_bundle(tmp_path, item), packages=[])
    assert [d.code for d in report.errors] == [E.E_CONFIG_SCHEMA_INVALID]
    assert report.errors[0].path == "goondan.yaml:16 spec.tools[0].overrides.kind"


@pytest.mark.parametrize(
    ("item", "code", "path"),
    [
        ("    - Tool/", E.E_CONFIG_INVALID_REF, "goondan.yaml:15 spec.tools[0]"),
        ("    - /fs", E.E_CONFIG_INVALID_REF, "goondan.yaml:15 spec.tools[0]"),
        ("    - Agent/main", E.E_CONFIG_INVALID_REF, "goondan.yaml:15 spec.tools[0]"),
        ("    - Tol/fs", E.E_CONFIG_INVALID_REF, "goondan.yaml:15 spec.tools[0]"),
        ("    - {ref: Tool/fs, selector: {}}", E.E_CONFIG_INVALID_REF,
         "goondan.yaml:15 spec.tools[0]"),
        ("    - {kind: Tool}", E.E_CONFIG_INVALID_REF, "goondan.yaml:15 spec.tools[0]"),
        ("    - ref: {kind: Tool, name: fss}", E.E_CONFIG_REF_NOT_FOUND,
         "goondan.yaml:15 spec.tools[0].ref"),
    ],
)  # fmt: skip
def test_malformed_and_missing_refs(tmp_path: Path, item: str, code: ErrorCode, path: str) -> None:
    report = inspect_bundle(_agent_bundle(tmp_path, item), packages=[])
    assert [(d.code, d.path) for d in report.errors] == [(code, path)]


def test_missing_ref_suggests_closest_names(tmp_path: Path) -> None:
    report = inspect_bundle(_agent_bundle(tmp_path, "    - Tool/shel"), packages=[])
    assert report.errors[0].suggestion == "closest existing: Tool/shell"


def test_parse_ref_forms() -> None:
    assert parse_ref("Tool/x") == ObjectRef(kind="Tool", name="x")
    assert parse_ref("x", expected=Kind.MODEL) == ObjectRef(kind="Model", name="x")
    with pytest.raises(RefFailure) as info:
        parse_ref("x")
    assert info.value.code is E.E_CONFIG_INVALID_REF
    with pytest.raises(RefFailure):
        parse_ref("Tool/a/b", expected=Kind.TOOL)


def test_deep_merge_rules() -> None:
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    assert deep_merge(base, {"a": {"c": [3], "e": None, "b": None}, "f": {"g": 1}}) == {
        "a": {"c": [3]},
        "d": 1,
        "f": {"g": 1},
    }
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": 1}


# -- packages ------------------------------------------------------------------------------


def _package(tmp: Path, name: str, tool: str = "bash") -> Path:
    pkg = tmp / name.replace("/", "_").lstrip("@")
    (pkg / "tools").mkdir(parents=True)
    (pkg / "tools" / "t.py").write_text("handlers = {}\n")
    write_bundle(
        pkg,
        f"""\
apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: "{name}"
---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: {tool}
  labels: {{tier: base}}
spec:
  entry: ./tools/t.py
  exports: [{{name: exec}}]
""",
    )
    return pkg


def test_short_ref_reaches_the_package(tmp_path: Path) -> None:
    base = _package(tmp_path, "@goondan/base")
    bundle = load_bundle(_agent_bundle(tmp_path / "b", "    - Tool/bash"), packages=[base])
    (bash,) = _tools(bundle)
    assert (bash.package, bash.root, bash.key) == ("@goondan/base", base, "@goondan/base:Tool/bash")


def test_explicit_package_ref(tmp_path: Path) -> None:
    base = _package(tmp_path, "@goondan/base")
    item = "    - ref: {kind: Tool, name: bash, package: '@goondan/base'}"
    bundle = load_bundle(_agent_bundle(tmp_path / "b", item), packages=[base])
    assert [t.key for t in _tools(bundle)] == ["@goondan/base:Tool/bash"]


def test_user_resource_wins_over_package(tmp_path: Path) -> None:
    base = _package(tmp_path, "@goondan/base", tool="shell")
    bundle = load_bundle(_agent_bundle(tmp_path / "b", "    - Tool/shell"), packages=[base])
    assert [t.key for t in _tools(bundle)] == ["Tool/shell"]
    item = "    - {ref: Tool/shell, package: '@goondan/base'}"
    bundle = load_bundle(_agent_bundle(tmp_path / "c", item), packages=[base])
    assert [t.key for t in _tools(bundle)] == ["@goondan/base:Tool/shell"]


def test_ambiguous_short_ref_lists_both_packages(tmp_path: Path) -> None:
    one, two = _package(tmp_path, "@a/one"), _package(tmp_path, "@b/two")
    report = inspect_bundle(_agent_bundle(tmp_path / "b", "    - Tool/bash"), packages=[one, two])
    assert [(d.code, d.path) for d in report.errors] == [
        (E.E_CONFIG_INVALID_REF, "goondan.yaml:15 spec.tools[0]")
    ]
    assert "@a/one:Tool/bash" in report.errors[0].message
    assert "@b/two:Tool/bash" in report.errors[0].message


def test_selector_over_package_resources(tmp_path: Path) -> None:
    base = _package(tmp_path, "@goondan/base")
    item = "    - selector: {matchLabels: {tier: base}, package: '@goondan/base'}"
    bundle = load_bundle(_agent_bundle(tmp_path / "b", item), packages=[base])
    assert [t.key for t in _tools(bundle)] == ["@goondan/base:Tool/bash"]


def test_package_errors_name_the_package_file(tmp_path: Path) -> None:
    base = _package(tmp_path, "@goondan/base")
    (base / "tools" / "t.py").unlink()
    report = inspect_bundle(_agent_bundle(tmp_path / "b", "    - Tool/fs"), packages=[base])
    assert [(d.code, d.path) for d in report.errors] == [
        (E.E_CONFIG_ENTRY_NOT_FOUND, "@goondan/base/goondan.yaml:12 spec.entry")
    ]


# -- runtime helpers -----------------------------------------------------------------------


def test_runtime_helpers(tmp_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "main.md").write_text("Be brief.\n")
    path = _agent_bundle(tmp_path, "    - Tool/fs")
    text = path.read_text().replace(
        "prompt: {system: hi}", "prompt: {system: hi, systemRef: prompts/main.md}"
    )
    path.write_text(text)
    bundle = load_bundle(path, packages=[])
    swarm = bundle.swarm()
    agent = refs.entry_agent(bundle, swarm)
    assert agent.name == "main"
    assert [a.name for a in refs.swarm_agents(bundle, swarm)] == ["main"]
    assert refs.resolve_model(bundle, agent).name == "fake"
    assert refs.resolve_extensions(bundle, agent) == []
    assert refs.system_prompt(bundle, agent) == "hi\n\nBe brief."


def test_runtime_helper_errors_are_coded(tmp_path: Path) -> None:
    bundle = load_bundle(_agent_bundle(tmp_path, "    - Tool/fs"), packages=[])
    with pytest.raises(BundleError) as info:
        refs.find(bundle, "Model/other", Kind.MODEL)
    assert info.value.codes == [E.E_CONFIG_REF_NOT_FOUND]
