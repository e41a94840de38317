"""Installed packages: discovery by entry point, dependency ranges, scopes and their codes.

Each test installs throwaway distributions (tests/distributions.py) into a directory put on
sys.path, so importlib.metadata sees them exactly as it sees a wheel pip installed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bundles import refs
from bundles.kinds import BASE_PACKAGE, Kind
from bundles.loader import inspect_bundle, load_bundle
from bundles.packages.installed import clear_cache, installed
from bundles.packages.requirements import compatible_range, distribution_for
from protocol.errors import ErrorCode
from tests.distributions import add_distribution, package_yaml

E = ErrorCode
BASE_DIR = Path(__file__).resolve().parents[3] / "bundles" / "base"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tmp_path / "site"
    path.mkdir()
    monkeypatch.syspath_prepend(str(path))
    clear_cache()
    yield path
    clear_cache()


def _github(site: Path, version: str = "1.4.0", tools: tuple[str, ...] = ("github",)) -> Path:
    return add_distribution(
        site,
        "acme-github",
        version,
        {"@acme/github": "acme_github"},
        yaml=package_yaml("@acme/github", tools),
    )


def _bundle(tmp: Path, deps: dict[str, str], tools: list[str]) -> Path:
    lines = ["apiVersion: goondan.ai/v1", "kind: Package", "metadata:", "  name: my-bundle"]
    lines += ["spec:", "  dependencies:" + ("" if deps else " {}")]
    lines += [f'    "{name}": {value}' for name, value in deps.items()]
    lines += ["---", "apiVersion: goondan.ai/v1", "kind: Model", "metadata: {name: fake}"]
    lines += ["spec: {provider: scripted, model: test}", "---", "apiVersion: goondan.ai/v1"]
    lines += ["kind: Agent", "metadata: {name: main}", "spec:", "  modelConfig: {modelRef: fake}"]
    lines += ["  tools:" + ("" if tools else " []")] + [f"    - {tool}" for tool in tools]
    lines += ["---", "apiVersion: goondan.ai/v1", "kind: Swarm", "metadata: {name: s}"]
    lines += ["spec: {entryAgent: main, agents: [main]}"]
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "goondan.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _line(path: Path, needle: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def _errors(path: Path) -> list[tuple[ErrorCode, str]]:
    return [(d.code, d.path) for d in inspect_bundle(path).errors]


# -- discovery -----------------------------------------------------------------------------


def test_installed_packages_are_found_by_entry_point(site: Path) -> None:
    directory = _github(site)
    found = installed()
    github = found["@acme/github"]
    assert (github.distribution, github.version, github.module) == (
        "acme-github",
        "1.4.0",
        "acme_github",
    )
    assert (github.directory, github.problem) == (directory, None)
    base = found[BASE_PACKAGE]  # goondan's own distribution, through the same entry point
    assert (base.module, base.directory, base.problem) == ("bundles.base", BASE_DIR, None)


def test_discovery_never_imports_the_package(site: Path) -> None:
    directory = _github(site)
    (directory / "__init__.py").write_text("raise SystemExit('imported')\n")
    assert installed()["@acme/github"].directory == directory
    assert "acme_github" not in sys.modules


def test_broken_entry_points_are_listed_with_their_problem(site: Path) -> None:
    add_distribution(site, "gone", "1.0", {"@acme/gone": "no_such_module"})
    add_distribution(site, "attr", "1.0", {"@acme/attr": "os:path"})
    add_distribution(site, "plain", "1.0", {"@acme/plain": "json.decoder"})  # a file, not a dir
    add_distribution(site, "dots", "1.0", {"@acme/dots": "a..b"})
    found = installed()
    for name in ("@acme/gone", "@acme/attr", "@acme/plain", "@acme/dots"):
        assert found[name].directory is None
        assert found[name].problem


def test_two_distributions_claiming_one_name_make_it_unusable(site: Path) -> None:
    _github(site)
    add_distribution(site, "evil-github", "9.0", {"@acme/github": "acme_github"})
    claimed = installed()["@acme/github"]
    assert claimed.directory is None
    assert "acme-github 1.4.0" in str(claimed.problem)
    assert "evil-github 9.0" in str(claimed.problem)
    path = _bundle(
        site.parent / "b", {"@acme/github": '">=1"'}, ["{ref: github, package: '@acme/github'}"]
    )
    assert _errors(path) == [(E.E_PACKAGE_INVALID, "goondan.yaml:7 spec.dependencies.@acme/github")]


def test_the_cache_sees_an_install(site: Path) -> None:
    assert "@acme/github" not in installed()
    _github(site)
    os.utime(site, ns=(1, 1))  # a new mtime even where the clock's tick is coarse
    assert "@acme/github" in installed()


# -- dependencies and versions -------------------------------------------------------------


def test_a_dependency_in_range_is_loaded_under_its_scope(site: Path) -> None:
    directory = _github(site)
    path = _bundle(site.parent / "b", {"@acme/github": '">=1.2,<2"'}, ["github", "bash"])
    bundle = load_bundle(path)
    agent = bundle.agent("main")
    tools = refs.resolve_tools(bundle, agent)
    assert [t.key for t in tools] == ["@acme/github:Tool/github", "@goondan/base:Tool/bash"]
    assert tools[0].root == directory
    assert bundle.packages == {
        BASE_PACKAGE: installed()[BASE_PACKAGE].version,
        "@acme/github": "1.4.0",
    }


def test_a_version_outside_the_range(site: Path) -> None:
    _github(site, version="2.1.0")
    path = _bundle(site.parent / "b", {"@acme/github": '">=1.2,<2"'}, ["github"])
    report = inspect_bundle(path)
    assert [(d.code, d.path) for d in report.errors] == [
        (E.E_PACKAGE_VERSION, "goondan.yaml:7 spec.dependencies.@acme/github")
    ]
    assert "2.1.0" in report.errors[0].message
    assert "pip install 'acme-github>=1.2,<2'" in str(report.errors[0].suggestion)


def test_a_dependency_not_installed_is_reported_once(site: Path) -> None:
    path = _bundle(
        site.parent / "b",
        {"@acme/other": '">=1"', "@acme/long": "{version: '==2.*', distribution: acme-long-dist}"},
        ["{ref: other, package: '@acme/other'}"],
    )
    report = inspect_bundle(path)
    assert [(d.code, d.path) for d in report.errors] == [
        (E.E_PACKAGE_NOT_INSTALLED, "goondan.yaml:7 spec.dependencies.@acme/other"),
        (E.E_PACKAGE_NOT_INSTALLED, "goondan.yaml:8 spec.dependencies.@acme/long"),
    ]
    hints = [str(d.suggestion) for d in report.errors]
    assert "pip install 'acme-other>=1'" in hints[0]
    assert "uv add 'acme-long-dist==2.*'" in hints[1]


def test_bad_dependency_names_ranges_and_distributions(site: Path) -> None:
    deps = {
        "@acme/github": '"about two"',
        "no/scope/x": '"1"',
        "@acme/x": "{version: '>=1', distribution: 'x; rm -rf ~'}",
    }
    assert _errors(_bundle(site.parent / "b", deps, [])) == [
        (E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:7 spec.dependencies.@acme/github"),
        (E.E_CONFIG_INVALID_NAME, "goondan.yaml:8 spec.dependencies.no/scope/x"),
        (E.E_CONFIG_INVALID_NAME, "goondan.yaml:9 spec.dependencies.@acme/x.distribution"),
    ]


def test_a_reference_to_an_undeclared_package(site: Path) -> None:
    _github(site)
    path = _bundle(site.parent / "b", {}, ["{ref: github, package: '@acme/github'}"])
    report = inspect_bundle(path)
    line = _line(path, "package: '@acme/github'")
    assert [(d.code, d.path) for d in report.errors] == [
        (E.E_PACKAGE_NOT_DECLARED, f"goondan.yaml:{line} spec.tools[0].ref")
    ]
    assert '"@acme/github": ">=1.4.0,<2"' in str(report.errors[0].suggestion)


def test_installing_a_package_does_not_change_what_a_short_ref_means(site: Path) -> None:
    _github(site, tools=("bash",))  # the same name as @goondan/base's Tool/bash
    path = _bundle(site.parent / "b", {}, ["bash"])
    bundle = load_bundle(path)
    tools = refs.resolve_tools(bundle, bundle.agent("main"))
    assert [t.key for t in tools] == ["@goondan/base:Tool/bash"]


def test_two_packages_with_the_same_tool_name_stay_apart(site: Path) -> None:
    _github(site, tools=("issues",))
    add_distribution(
        site, "acme-gitlab", "0.3.1", {"@acme/gitlab": "acme_gitlab"},
        yaml=package_yaml("@acme/gitlab", ("issues",)),
    )  # fmt: skip
    deps = {"@acme/github": '">=1"', "@acme/gitlab": '">=0.3,<0.4"'}
    both = ["{ref: issues, package: '@acme/github'}", "{ref: issues, package: '@acme/gitlab'}"]
    bundle = load_bundle(_bundle(site.parent / "b", deps, both))
    tools = refs.resolve_tools(bundle, bundle.agent("main"))
    assert [t.key for t in tools] == ["@acme/github:Tool/issues", "@acme/gitlab:Tool/issues"]
    assert tools[0].root != tools[1].root
    short = _bundle(site.parent / "c", deps, ["issues"])
    assert [code for code, _ in _errors(short)] == [E.E_CONFIG_INVALID_REF]  # ambiguous


def test_a_package_named_otherwise_than_its_entry_point(site: Path) -> None:
    add_distribution(
        site, "acme-github", "1.0", {"@acme/github": "acme_github"},
        yaml=package_yaml("@acme/impostor"),
    )  # fmt: skip
    path = _bundle(site.parent / "b", {"@acme/github": "null"}, [])
    assert _errors(path) == [(E.E_PACKAGE_INVALID, "@acme/github/goondan.yaml")]


def test_a_package_without_goondan_yaml(site: Path) -> None:
    directory = add_distribution(site, "acme-empty", "1.0", {"@acme/empty": "acme_empty"})
    directory.mkdir()
    path = _bundle(site.parent / "b", {"@acme/empty": "null"}, [])
    assert _errors(path) == [(E.E_PACKAGE_INVALID, "@acme/empty/goondan.yaml")]


AGENTS_PACKAGE = """\
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: helper}
spec:
  modelConfig: {modelRef: {kind: Model, name: fake}}
  tools:
    - {ref: github, package: "@acme/github"}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: fake}
spec: {provider: scripted, model: test}
"""


def test_dependencies_of_a_dependency_are_loaded_and_checked(site: Path) -> None:
    _github(site, version="1.4.0")
    yaml = package_yaml("@acme/agents", (), AGENTS_PACKAGE).replace(
        'version: "1.0.0"', 'version: "1.0.0"\n  dependencies: {"@acme/github": ">=1.4"}'
    )
    add_distribution(site, "acme-agents", "1.0", {"@acme/agents": "acme_agents"}, yaml=yaml)
    path = _bundle(site.parent / "b", {"@acme/agents": '">=1"'}, [])
    path.write_text(
        path.read_text().replace(
            "agents: [main]", "agents: [main, {ref: helper, package: '@acme/agents'}]"
        )
    )
    bundle = load_bundle(path)
    helper = bundle.find(Kind.AGENT, "helper", "@acme/agents")
    assert helper is not None
    assert [t.key for t in refs.resolve_tools(bundle, helper)] == ["@acme/github:Tool/github"]
    # the bundle itself did not declare @acme/github: it may not name it
    direct = _bundle(
        site.parent / "c", {"@acme/agents": '">=1"'}, ["{ref: github, package: '@acme/github'}"]
    )
    assert [code for code, _ in _errors(direct)] == [E.E_PACKAGE_NOT_DECLARED]


def test_explicit_package_directories_skip_the_checks(tmp_path: Path) -> None:
    path = _bundle(tmp_path / "b", {"@acme/nowhere": '">=1"'}, ["bash"])
    bundle = load_bundle(path, packages=[BASE_DIR])
    assert bundle.packages is None


def test_distribution_names_and_ranges() -> None:
    assert distribution_for("@acme/github") == "acme-github"
    assert distribution_for("tools") == "tools"
    assert compatible_range("1.4.2") == ">=1.4.2,<2"
    assert compatible_range("0.3.1") == ">=0.3.1,<0.4"


def test_a_distribution_cannot_take_over_the_built_in_package(site: Path) -> None:
    add_distribution(
        site, "evil", "9.9", {BASE_PACKAGE: "evil_base"}, yaml=package_yaml(BASE_PACKAGE, ("bash",))
    )
    path = _bundle(site.parent / "b", {}, [])
    report = inspect_bundle(path)
    assert [(d.code, d.path) for d in report.errors] == [(E.E_PACKAGE_INVALID, "goondan.yaml")]
    assert "evil 9.9" in report.errors[0].message
