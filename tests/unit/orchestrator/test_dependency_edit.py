"""orchestrator.dependency_edit: `package add`'s text edit of the Package document keeps
comments, order and the other documents, and refuses what it cannot edit safely."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator.dependency_edit import EditError, add_dependency, write_atomically
from protocol.errors import ErrorCode

REST = "---\n# the agent\nkind: Agent\nmetadata: {name: a}   # kept\n"


def test_block_spec_gains_a_dependencies_block_after_its_last_line() -> None:
    text = "# top\nkind: Package\nmetadata:\n  name: b\nspec:\n  version: '1'  # v\n" + REST
    out = add_dependency(text, "@acme/t", ">=0.1,<0.2")
    assert out == (
        "# top\nkind: Package\nmetadata:\n  name: b\nspec:\n  version: '1'  # v\n"
        '  dependencies:\n    "@acme/t": ">=0.1,<0.2"\n' + REST
    )


def test_no_spec_is_appended_to_the_first_document() -> None:
    out = add_dependency("kind: Package\nmetadata: {name: b}\n" + REST, "x", None)
    assert (
        out == 'kind: Package\nmetadata: {name: b}\nspec:\n  dependencies:\n    "x": null\n' + REST
    )


def test_existing_entry_is_updated_in_place_with_its_comment() -> None:
    text = (
        "kind: Package\nmetadata: {name: b}\nspec:\n    dependencies:\n      # pinned\n"
        '      other: ">=1"\n      "@acme/t": ">=0.0"  # why\n    version: "2"\n'
    )
    out = add_dependency(text, "@acme/t", ">=0.1,<0.2")
    assert out == text.replace('"@acme/t": ">=0.0"  # why', '"@acme/t": ">=0.1,<0.2"  # why')
    added = add_dependency(text, "@acme/z", {"version": ">=2", "distribution": "z-dist"})
    assert yaml.safe_load(added)["spec"]["dependencies"] == {
        "other": ">=1", "@acme/t": ">=0.0", "@acme/z": {"version": ">=2", "distribution": "z-dist"}
    }  # fmt: skip
    assert added.index("other") < added.index("@acme/t") < added.index("@acme/z")


@pytest.mark.parametrize("deps", ["{}", "null", "", '{"a": ">=1"}'])
def test_flow_empty_or_null_dependencies(deps: str) -> None:
    text = f"kind: Package\nmetadata: {{name: b}}\nspec:\n  dependencies: {deps}\n" + REST
    out = add_dependency(text, "@acme/t", ">=1,<2")
    wanted = {"a": ">=1"} if "a" in deps else {}
    assert yaml.safe_load_all(out).__next__()["spec"]["dependencies"] == {
        **wanted,
        "@acme/t": ">=1,<2",
    }
    assert out.endswith(REST)


@pytest.mark.parametrize(
    "text",
    [
        "kind: Agent\nmetadata: {name: a}\n",  # no Package document
        "kind: Package\nmetadata: {name: b}\nspec: {version: '1'}\n",  # flow spec
        "kind: Package\nmetadata: {name: b}\nspec:\n\tversion: '1'\n",  # a tab
        "kind: Package\nmetadata: &m {name: b}\nspec:\n  version: '1'\n",  # an anchor
        'kind: Package\nmetadata: {name: b}\nspec:\n  dependencies: {"@acme/t": ">=1"}\n',
        "kind: Package\nmetadata: {name: b}\nspec:\n  dependencies: {a: 1,\n    b: 2}\n",
        "kind: Package\nmetadata: {name: 'b: {x'}\nspec: [\n",  # does not parse
    ],
)
def test_hostile_or_unsupported_inputs_are_refused(text: str) -> None:
    with pytest.raises(EditError) as err:
        add_dependency(text, "@acme/t", ">=1")
    assert err.value.code is ErrorCode.E_PACKAGE_EDIT


def test_a_package_name_with_yaml_specials_is_quoted() -> None:
    text = "kind: Package\nmetadata: {name: 'b#: x'}\nspec:\n  version: '1'\n"
    out = add_dependency(text, "@a-b/c.d_e", ">=1")
    assert yaml.safe_load(out)["spec"]["dependencies"] == {"@a-b/c.d_e": ">=1"}


def test_write_atomically_keeps_the_mode(tmp_path: Path) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_text("old")
    path.chmod(0o640)
    write_atomically(path, "new")
    assert (path.read_text(), path.stat().st_mode & 0o777) == ("new", 0o640)
    assert [p.name for p in tmp_path.iterdir()] == ["goondan.yaml"]
