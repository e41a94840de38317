"""`goondan validate --deep`: every entry the swarm uses is imported in a throwaway process and
checked against the bundle; what `validate` alone calls valid and an agent then fails on."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.deepcheck import deep_check
from protocol.errors import ErrorCode

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec: {provider: scripted, model: x, options: {script: [{reply: hi}]}}
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: calc}
spec:
  entry: ./calc.py
  exports:
    - {name: add, parameters: {type: object}}
    - {name: sub, parameters: {type: object}}
---
apiVersion: goondan.ai/v1
kind: Extension
metadata: {name: ext}
spec: {entry: ./ext.py}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: a}
spec:
  modelConfig: {modelRef: Model/m}
  tools: [{ref: Tool/calc}]
  extensions: [{ref: Extension/ext}]
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: s}
spec: {entryAgent: Agent/a, agents: [{ref: Agent/a}]}
---
apiVersion: goondan.ai/v1
kind: Connector
metadata: {name: src}
spec: {entry: ./src.py, events: [{name: message}]}
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: feed}
spec:
  connectorRef: Connector/src
  ingress: {rules: [{match: {event: message}, route: {}}]}
"""
GOOD = {
    "calc.py": "handlers = {'add': lambda ctx, i: 1, 'sub': lambda ctx, i: 0}\n",
    "ext.py": "def register(api, config):\n    pass\n",
    "src.py": "async def run(ctx):\n    pass\n",
}


def _bundle(tmp_path: Path, **files: str) -> Path:
    (tmp_path / "goondan.yaml").write_text(BUNDLE)
    for name, text in (GOOD | {k.replace("_", "."): v for k, v in files.items()}).items():
        (tmp_path / name).write_text(text)
    return tmp_path / "goondan.yaml"


def test_a_bundle_whose_entries_fit_has_nothing_to_report(tmp_path: Path) -> None:
    assert deep_check(_bundle(tmp_path)) == []


@pytest.mark.parametrize(
    ("files", "code", "fragment"),
    [
        ({"calc_py": "x = 1\n"}, ErrorCode.E_TOOL_LOAD, "handlers"),
        ({"calc_py": "handlers = {'add': lambda c, i: 1}\n"}, ErrorCode.E_TOOL_LOAD, "'sub'"),
        ({"calc_py": "raise RuntimeError('boom')\n"}, ErrorCode.E_TOOL_LOAD, "calc.py"),
        ({"ext_py": "x = 1\n"}, ErrorCode.E_EXT_LOAD, "register"),
        ({"src_py": "x = 1\n"}, ErrorCode.E_CONNECTOR_START_FAILED, "run(ctx)"),
    ],
    ids=["no-handlers", "export-without-handler", "import-fails", "no-register", "no-run"],
)
def test_what_an_agent_would_fail_on_is_found(
    tmp_path: Path, files: dict[str, str], code: ErrorCode, fragment: str
) -> None:
    found = deep_check(_bundle(tmp_path, **files))
    assert [d.code for d in found] == [code]
    assert fragment in found[0].message and found[0].path.startswith("goondan.yaml:")


def test_an_entry_that_hangs_is_reported_not_waited_for(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, calc_py="import time\ntime.sleep(3600)\n")
    found = deep_check(bundle, timeout=3)
    assert [d.code for d in found] == [ErrorCode.E_CONFIG_ENTRY_CHECK]


def test_validate_deep_exits_2_where_plain_validate_says_valid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = _bundle(tmp_path, calc_py="handlers = {'add': lambda c, i: 1}\n")
    assert main(["validate", str(bundle)]) == 0
    assert main(["validate", "--deep", str(bundle)]) == 2
    assert "E_TOOL_LOAD" in capsys.readouterr().err


def test_an_entry_that_ends_the_checker_is_named(tmp_path: Path) -> None:
    found = deep_check(_bundle(tmp_path, calc_py="import os\nos._exit(3)\n"))
    assert [d.code for d in found] == [ErrorCode.E_CONFIG_ENTRY_CHECK]
    assert "code 3 while importing Tool/calc" in found[0].message
