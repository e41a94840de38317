"""Installed packages through the real CLI: `goondan package list`, `validate` with version
ranges, and a turn whose model calls a package's tool in a real agent process.

The package is a distribution installed into a directory on the CLI's PYTHONPATH
(tests/distributions.py): importlib.metadata finds it there as it finds a wheel pip installed.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tests.distributions import add_distribution, package_yaml
from tests.integration.harness import REPO, run_cli

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Package
metadata: {{name: uses-github}}
spec:
  dependencies: {{"@acme/github": "{wanted}", {extra}}}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: fake}}
spec:
  provider: scripted
  model: test
  options:
    script:
      - {{afterTool: github__hello, reply: "tool said {{last_tool_result}}"}}
      - {{toolCalls: [{{name: github__hello}}]}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: main}}
spec:
  modelConfig: {{modelRef: fake}}
  tools: [{{ref: github, package: "@acme/github"}}]
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: pkgs}}
spec: {{entryAgent: main, agents: [main]}}
"""


def _site(tmp: Path) -> tuple[dict[str, str], Path]:
    site = tmp / "site"
    module = add_distribution(
        site, "acme-github", "1.4.0", {"@acme/github": "acme_github"},
        yaml=package_yaml("@acme/github"),
    )  # fmt: skip
    return {"PYTHONPATH": f"{site}:{REPO}"}, module


def _bundle(tmp: Path, wanted: str, extra: str = "") -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "goondan.yaml"
    path.write_text(BUNDLE.format(wanted=wanted, extra=extra))
    return path


async def test_package_list_shows_the_installed_package_and_its_use(tmp_path: Path) -> None:
    env, module = _site(tmp_path)
    bundle = _bundle(tmp_path / "b", ">=1.2,<2")
    async with asyncio.timeout(60):
        code, out, err = await run_cli(
            "package", "list", "--json", "--bundle", str(bundle), env=env
        )
    assert code == 0, err
    data = json.loads(out)
    by_name = {p["name"]: p for p in data["packages"]}
    github = by_name["@acme/github"]
    assert (github["distribution"], github["version"]) == ("acme-github", "1.4.0")
    assert (github["location"], github["problem"]) == (str(module), None)
    assert github["resources"] == [{"kind": "Tool", "name": "github"}]
    assert (github["declared"], github["wanted"], github["used"]) == (
        True, ">=1.2,<2", ["Tool/github"],
    )  # fmt: skip
    assert by_name["@goondan/base"]["distribution"] == "goondan-daemon"
    assert {"kind": "Tool", "name": "bash"} in by_name["@goondan/base"]["resources"]
    assert data["bundle"] == {"path": str(bundle), "valid": True, "errors": []}
    async with asyncio.timeout(60):
        code, out, _ = await run_cli("package", "list", "--bundle", str(bundle), env=env)
    assert code == 0
    assert f"@acme/github  acme-github 1.4.0  {module}" in out.splitlines()
    assert "  used by the bundle: Tool/github" in out.splitlines()


async def test_validate_checks_ranges_and_installs(tmp_path: Path) -> None:
    env, _ = _site(tmp_path)
    cases = {
        ">=1.2,<2": [],
        ">=2": [("E_PACKAGE_VERSION", "goondan.yaml:5 spec.dependencies.@acme/github")],
    }
    for wanted, expected in cases.items():
        bundle = _bundle(tmp_path / f"b{len(expected)}", wanted)
        async with asyncio.timeout(60):
            code, out, _ = await run_cli("validate", "--json", str(bundle), env=env)
        found = [(e["code"], e["path"]) for e in json.loads(out)["errors"]]
        assert (code, found) == (2 if expected else 0, expected)
    missing = _bundle(tmp_path / "m", ">=1", extra='"@acme/absent": ">=0.1"')
    async with asyncio.timeout(60):
        code, out, _ = await run_cli("validate", "--json", str(missing), env=env)
    errors = json.loads(out)["errors"]
    assert code == 2
    assert [(e["code"], e["path"]) for e in errors] == [
        ("E_PACKAGE_NOT_INSTALLED", "goondan.yaml:5 spec.dependencies.@acme/absent")
    ]
    assert "pip install 'acme-absent>=0.1'" in errors[0]["suggestion"]


async def test_a_turn_calls_the_package_tool(tmp_path: Path) -> None:
    env, _ = _site(tmp_path)
    bundle = _bundle(tmp_path / "b", ">=1.2,<2")
    async with asyncio.timeout(90):
        code, out, err = await run_cli("run", str(bundle), "--input", "hi", env=env)
    assert code == 0, err
    assert "from-the-package" in out
