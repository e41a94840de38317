"""`goondan package new` and `package check` through the real CLI: the package `new` writes
passes `check`, serves its Tool to a turn in a real agent process, and its own test passes as
written; bad names or a non-empty DIR are refused; `check` names every problem of a broken
package with its code and file:line.

The written distribution is "installed" by writing the *.dist-info an installer would write
beside its module (tests/distributions.py) and putting its directory on PYTHONPATH: no pip, no
network.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from tests.distributions import add_distribution
from tests.integration.harness import REPO, run_cli

BUNDLE = """\
# a bundle that uses the new package: this comment stays
apiVersion: goondan.ai/v1
kind: Package
metadata: {name: uses-triage}
spec:
  dependencies: {"@acme/triage": ">=0.1,<1"}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: fake}
spec:
  provider: scripted
  model: test
  options:
    script:
      - {afterTool: triage__greet, reply: "tool said {last_tool_result}"}
      - {toolCalls: [{name: triage__greet, args: {name: Ada}}]}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: main}
spec:
  modelConfig: {modelRef: fake}
  tools: [{ref: triage, package: "@acme/triage"}]
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: ticks}
spec:
  connectorRef: {kind: Connector, name: triage-ticker, package: "@acme/triage"}
  config: {intervalSeconds: "3600"}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: triage-user}
spec: {entryAgent: main, agents: [main]}
"""


async def test_new_package_serves_its_tool_and_passes_its_test(tmp_path: Path) -> None:
    project = tmp_path / "triage"
    async with asyncio.timeout(60):
        code, out, err = await run_cli("package", "new", "@acme/triage", str(project))
    assert code == 0, err
    module = project / "acme_triage"
    for rel in ("goondan.yaml", "tools/greet.py", "connectors/ticker.py"):
        assert (module / rel).is_file(), rel
    pyproject = (project / "pyproject.toml").read_text()
    assert '"@acme/triage" = "acme_triage"' in pyproject
    assert '"acme_triage" = ["goondan.yaml"]' in pyproject
    async with asyncio.timeout(60):
        code, out, err = await run_cli("package", "check", str(project))
    assert code == 0, err
    assert "Tool/triage, Connector/triage-ticker" in out
    add_distribution(project, "acme-triage", "0.1.0", {"@acme/triage": "acme_triage"})
    env = {"PYTHONPATH": f"{project}:{REPO}"}
    bundle = tmp_path / "b" / "goondan.yaml"
    bundle.parent.mkdir()
    bundle.write_text(BUNDLE)
    async with asyncio.timeout(60):
        code, out, err = await run_cli("validate", str(bundle), env=env)
    assert code == 0, out + err
    async with asyncio.timeout(90):
        code, out, err = await run_cli("run", str(bundle), "--input", "hi", env=env)
    assert code == 0, err
    assert "hello, Ada" in out
    # the package's own test, as its author runs it
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests",
        cwd=project, env={"PYTHONPATH": f"{project}:{REPO}", "PATH": "/usr/bin:/bin"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    async with asyncio.timeout(60):
        report, _ = await proc.communicate()
    assert proc.returncode == 0, report.decode()


async def test_new_refuses_a_bad_name_and_a_non_empty_dir(tmp_path: Path) -> None:
    async with asyncio.timeout(60):
        code, _, err = await run_cli("package", "new", "@Bad Scope/x", str(tmp_path / "a"))
    assert (code, "E_PACKAGE_INVALID" in err) == (2, True)
    assert not (tmp_path / "a").exists()
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine")
    async with asyncio.timeout(60):
        code, _, err = await run_cli("package", "new", "@acme/x", str(taken))
    assert code == 2
    assert sorted(p.name for p in taken.iterdir()) == ["keep.txt"]


def _break(project: Path) -> None:
    """Three problems at once: the versions differ, a tool without handler, a connector without
    run()."""
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('version = "0.1.0"', 'version = "0.2.0"'))
    module = project / "acme_triage"
    tool = module / "tools" / "greet.py"
    tool.write_text(tool.read_text().replace('handlers = {"greet": greet}', "handlers = {}"))
    connector = module / "connectors" / "ticker.py"
    connector.write_text(connector.read_text().replace("async def run(", "async def serve("))


async def _check(project: Path) -> tuple[int, list[tuple[str, str]]]:
    async with asyncio.timeout(60):
        code, out, _ = await run_cli("package", "check", "--json", str(project))
    return code, [(e["code"], e["path"]) for e in json.loads(out)["errors"]]


async def test_check_names_each_problem_with_its_code(tmp_path: Path) -> None:
    project = tmp_path / "triage"
    async with asyncio.timeout(60):
        code, _, err = await run_cli("package", "new", "@acme/triage", str(project))
    assert code == 0, err
    _break(project)
    assert await _check(project) == (1, [
        ("E_PACKAGE_INVALID", "acme_triage/goondan.yaml:9 spec.version"),
        ("E_TOOL_LOAD", "acme_triage/goondan.yaml:12"),
        ("E_CONNECTOR_START_FAILED", "acme_triage/goondan.yaml:28"),
    ])  # fmt: skip
    yaml = project / "acme_triage" / "goondan.yaml"
    yaml.write_text(
        yaml.read_text()
        .replace('name: "@acme/triage"', 'name: "@acme/other"')
        .replace("  entry: ./tools/greet.py", "  entry: ./tools/greet.py\n  bogus: 1")
    )
    assert await _check(project) == (1, [
        ("E_PACKAGE_INVALID", "acme_triage/goondan.yaml:7 metadata.name"),
        ("E_PACKAGE_INVALID", "acme_triage/goondan.yaml:9 spec.version"),
        ("E_CONFIG_SCHEMA_INVALID", "acme_triage/goondan.yaml:18 spec.bogus"),
    ])  # fmt: skip
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"goondan.packages"', '"other"'))
    assert await _check(project) == (1, [
        ("E_PACKAGE_INVALID", f'{pyproject} [project.entry-points."goondan.packages"]'),
    ])  # fmt: skip
    assert await _check(tmp_path / "none") == (1, [
        ("E_PACKAGE_INVALID", str(tmp_path / "none" / "pyproject.toml")),
    ])  # fmt: skip
