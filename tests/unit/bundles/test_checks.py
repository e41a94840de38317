"""Per-kind rules: model providers and scripts, tool entries, exports, schemas, swarms."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundles.loader import inspect_bundle, load_bundle
from bundles.paths import PathProblem, entry_target, is_module_name
from protocol.errors import ErrorCode
from tests.unit.bundles.conftest import VALID_TAIL, write_bundle

E = ErrorCode
HEAD = "apiVersion: goondan.ai/v1\n"  # each extra document starts at line 25 (after `---`)


def _errors(tmp_path: Path, doc: str) -> list[tuple[ErrorCode, str]]:
    write_bundle(tmp_path, VALID_TAIL + "---\n" + HEAD + doc)
    (tmp_path / "tool.py").write_text("handlers = {}\n")
    return [(d.code, d.path) for d in inspect_bundle(tmp_path, packages=[]).errors]


TOOL = "kind: Tool\nmetadata: {name: t}\nspec:\n"

CASES = [
    ("kind: Model\nmetadata: {name: m}\nspec: {provider: opnai, model: x}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:28 spec.provider"),
    ("kind: Model\nmetadata: {name: m}\nspec:\n  provider: scripted\n  model: x\n  options:\n"
     "    script:\n      - match: '(unclosed'\n        reply: hi\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:33 spec.options.script[0].match"),
    ("kind: Model\nmetadata: {name: m}\nspec:\n  provider: scripted\n  model: x\n  options:\n"
     "    script:\n      - reply: hi\n        replyy: typo\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:34 spec.options.script[0].replyy"),
    ("kind: Model\nmetadata: {name: m}\nspec:\n  provider: scripted\n  model: x\n"
     "  options: {scriptFile: ../s.yaml}\n",
     E.E_CONFIG_PATH_ESCAPE, "goondan.yaml:31 spec.options.scriptFile"),
    (TOOL + "  entry: ./tool.py\n  exports:\n    - name: run\n"
     "      parameters: {type: object, properties: {a: {type: strin}}}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:32 spec.exports[0].parameters.properties.a.type"),
    (TOOL + "  entry: ./tool.py\n  exports:\n    - name: run\n      parameters: {type: string}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:32 spec.exports[0].parameters"),
    (TOOL + "  entry: ./tool.py\n  exports: [{name: run}, {name: run}]\n",
     E.E_CONFIG_DUPLICATE_NAME, "goondan.yaml:30 spec.exports[1].name"),
    (TOOL + "  entry: ./tool.py\n  exports: []\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:30 spec.exports"),
    (TOOL + "  exports: [{name: run}]\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:28 spec.entry"),
    (TOOL + "  entry: no_such_module_xyz.tools\n  exports: [{name: run}]\n",
     E.E_CONFIG_ENTRY_NOT_FOUND, "goondan.yaml:29 spec.entry"),
    (TOOL + "  entry: ./tool.py\n  errorMessageLimit: 0\n  exports: [{name: run}]\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:30 spec.errorMessageLimit"),
    (TOOL + "  mcp: {command: x, url: 'http://y'}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:29 spec.mcp"),
    ("kind: Extension\nmetadata: {name: e}\nspec: {config: {}}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:28 spec.entry"),
    ("kind: Connector\nmetadata: {name: c}\nspec:\n  entry: ./tool.py\n"
     "  events: [{name: m}, {name: m}]\n",
     E.E_CONFIG_DUPLICATE_NAME, "goondan.yaml:30 spec.events[1].name"),
    ("kind: Swarm\nmetadata: {name: s2}\nspec:\n  entryAgent: Agent/main\n  agents: []\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:30 spec.agents"),
    ("kind: Swarm\nmetadata: {name: s2}\nspec:\n  entryAgent: Agent/main\n  agents: [Agent/main]\n"
     "  policy: {shutdown: {gracePeriodSeconds: -1}}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:31 spec.policy.shutdown.gracePeriodSeconds"),
    ("kind: Swarm\nmetadata: {name: s2}\nspec:\n  entryAgent: Agent/main\n  agents: [Agent/main]\n"
     "  policy: {lifecycle: {idleTimeoutSeconds: 0}}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:31 spec.policy.lifecycle.idleTimeoutSeconds"),
    ("kind: Swarm\nmetadata: {name: s2}\nspec:\n  entryAgent: Agent/main\n  agents: [Agent/main]\n"
     "  policy: {maxLiveInstances: 0}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:31 spec.policy.maxLiveInstances"),
    ("kind: Swarm\nmetadata: {name: s2}\nspec:\n  entryAgent: Agent/main\n  agents: [Agent/main]\n"
     "  observability: {metrics: {port: 70000}}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:31 spec.observability.metrics.port"),
    ("kind: Swarm\nmetadata: {name: s2}\nspec:\n  entryAgent: Agent/main\n  agents: [Agent/main]\n"
     "  observability: {metrics: {port: 9464, host: ' '}}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:31 spec.observability.metrics.host"),
    ("kind: Swarm\nmetadata: {name: s2}\nspec:\n  entryAgent: Agent/main\n  agents: [Agent/main]\n"
     "  observability: {metrics: {host: 127.0.0.1}}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:31 spec.observability.metrics"),
    ("kind: Swarm\nmetadata: {name: s2}\nspec:\n  entryAgent: Agent/main\n  agents: [Agent/main]\n"
     "  observability: {logs: {maxFileBytes: 64}}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:31 spec.observability.logs.maxFileBytes"),
    ("kind: Swarm\nmetadata: {name: s2}\nspec:\n  entryAgent: Agent/main\n  agents: [Agent/main]\n"
     "  observability: {logs: {keepFiles: -1}}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:31 spec.observability.logs.keepFiles"),
    ("kind: Swarm\nmetadata: {name: s2}\nspec:\n  entryAgent: Agent/main\n  agents: [Agent/main]\n"
     "  observability: {logs: {maxFileBytes: 64MiB}}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:31 spec.observability.logs.maxFileBytes"),
    ("kind: Agent\nmetadata: {name: a2}\nspec:\n  modelConfig: {modelRef: Model/fake}\n"
     "  prompt: {systemRef: /etc/passwd}\n",
     E.E_CONFIG_PATH_ESCAPE, "goondan.yaml:30 spec.prompt.systemRef"),
    ("kind: Agent\nmetadata: {name: a2}\nspec:\n  modelConfig: {modelRef: Model/fake}\n"
     "  prompt: {systemRef: prompts/missing.md}\n",
     E.E_CONFIG_ENTRY_NOT_FOUND, "goondan.yaml:30 spec.prompt.systemRef"),
    ("kind: Connection\nmetadata: {name: c}\nspec:\n  connectorRef: Connector/nope\n",
     E.E_CONFIG_REF_NOT_FOUND, "goondan.yaml:29 spec.connectorRef"),
    ("kind: Agent\nmetadata: {name: outsider}\nspec: {modelConfig: {modelRef: Model/fake}}\n"
     "---\napiVersion: goondan.ai/v1\nkind: Connector\nmetadata: {name: c}\n"
     "spec: {entry: ./tool.py}\n---\napiVersion: goondan.ai/v1\nkind: Connection\n"
     "metadata: {name: c}\nspec:\n  connectorRef: Connector/c\n  ingress:\n    rules:\n"
     "      - route: {agentRef: Agent/outsider, instanceKeyProperty: chat}\n",
     E.E_CONFIG_REF_NOT_FOUND, "goondan.yaml:42 spec.ingress.rules[0].route.agentRef"),
    ("kind: Connector\nmetadata: {name: c}\nspec: {entry: ./tool.py}\n"
     "---\napiVersion: goondan.ai/v1\nkind: Connection\n"
     "metadata: {name: c}\nspec:\n  connectorRef: Connector/c\n  ingress:\n    rules:\n"
     "      - route: {instanceKey: a, instanceKeyProperty: chat}\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:37 spec.ingress.rules[0].route"),
    ("kind: Connector\nmetadata: {name: c}\nspec: {entry: ./tool.py}\n"
     "---\napiVersion: goondan.ai/v1\nkind: Connection\n"
     "metadata: {name: c}\nspec:\n  connectorRef: Connector/c\n  config:\n"
     "    approvers: [ann, {valueFrom: {env: APPROVER}}]\n",
     E.E_CONFIG_SCHEMA_INVALID, "goondan.yaml:36 spec.config.approvers"),
]  # fmt: skip


@pytest.mark.parametrize(("doc", "code", "path"), CASES)
def test_kind_rules(tmp_path: Path, doc: str, code: ErrorCode, path: str) -> None:
    assert _errors(tmp_path, doc) == [(code, path)]


@pytest.mark.parametrize("logs", ["{maxFileBytes: 0, keepFiles: 0}", "{maxFileBytes: 4096}", "{}"])
def test_log_rotation_settings_that_are_fine(tmp_path: Path, logs: str) -> None:
    doc = (
        "kind: Swarm\nmetadata: {name: s2}\nspec:\n  entryAgent: Agent/main\n"
        f"  agents: [Agent/main]\n  observability: {{logs: {logs}}}\n"
    )
    assert _errors(tmp_path, doc) == []


def test_entry_agent_must_be_a_member(tmp_path: Path) -> None:
    doc = (
        "kind: Agent\nmetadata: {name: other}\nspec: {modelConfig: {modelRef: Model/fake}}\n"
        "---\napiVersion: goondan.ai/v1\nkind: Swarm\nmetadata: {name: s2}\nspec:\n"
        "  entryAgent: Agent/other\n  agents: [Agent/main]\n"
    )
    assert _errors(tmp_path, doc) == [(E.E_CONFIG_REF_NOT_FOUND, "goondan.yaml:34 spec.entryAgent")]


@pytest.mark.parametrize(
    "doc",
    [
        TOOL + "  mcp: {command: my-mcp-server, args: [--stdio]}\n",
        TOOL + "  exports:\n    - name: approve\n      deferred: {method: ui/approve}\n",
        TOOL + "  entry: json\n  exports: [{name: run}]\n",
        TOOL + "  entry: bundles.kinds\n  exports: [{name: run}]\n",
        TOOL + "  entry: tool.py\n  exports: [{name: run, resultSchema: {type: object}}]\n",
    ],
    ids=["mcp", "deferred", "stdlib-module", "dotted-module", "plain-file"],
)
def test_tools_without_file_entry(tmp_path: Path, doc: str) -> None:
    assert _errors(tmp_path, doc) == []


def test_module_entry_is_found_in_the_bundle_without_importing(tmp_path: Path) -> None:
    pkg = tmp_path / "mytools"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise SystemExit('imported!')\n")
    (pkg / "shell.py").write_text("raise SystemExit('imported!')\n")
    assert is_module_name("mytools.shell")
    assert entry_target(tmp_path, "mytools.shell") == "mytools.shell"
    with pytest.raises(PathProblem):
        entry_target(tmp_path, "mytools.missing")
    doc = TOOL + "  entry: mytools.shell\n  exports: [{name: run}]\n"
    assert _errors(tmp_path, doc) == []


def test_hello_example_is_valid() -> None:
    root = Path(__file__).resolve().parents[3] / "bundles" / "examples" / "hello"
    bundle = load_bundle(root, packages=[])
    assert bundle.swarm().name == "hello"
    assert bundle.swarm().spec.entry_agent == "Agent/greeter"
    assert bundle.model("scripted").spec.provider == "scripted"


def test_watched_paths_and_fingerprints(tmp_path: Path) -> None:
    from bundles.files import fingerprint, resource_files, watched_paths

    (tmp_path / "prompt.md").write_text("v1")
    with_prompt = "modelRef: Model/fake\n  prompt: {systemRef: prompt.md}"
    tool_doc = "---\n" + HEAD + TOOL + "  entry: ./tool.py\n  exports: [{name: run}]\n"
    write_bundle(tmp_path, VALID_TAIL.replace("modelRef: Model/fake", with_prompt) + tool_doc)
    (tmp_path / "tool.py").write_text("handlers = {}\n")
    bundle = load_bundle(tmp_path, packages=[])
    agent, tool = bundle.agent("main"), bundle.tool("t")
    assert resource_files(agent) == [tmp_path / "goondan.yaml", (tmp_path / "prompt.md").resolve()]
    assert resource_files(tool)[1] == (tmp_path / "tool.py").resolve()
    assert set(watched_paths(bundle)) >= {tmp_path / "goondan.yaml", tmp_path / ".env"}
    before = fingerprint(agent)
    (tmp_path / "prompt.md").write_text("v2")
    assert fingerprint(agent) != before
    assert fingerprint(tool) == fingerprint(bundle.tool("t"))
