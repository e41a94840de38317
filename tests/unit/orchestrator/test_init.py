"""`goondan init`: every template validates, the commented real-LLM switch validates when
uncommented, and existing files are never overwritten without --force."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from bundles import refs
from bundles.kinds import Kind, ScriptedOptions
from bundles.loader import load_bundle
from bundles.naming import name_problem
from orchestrator.cli import main
from orchestrator.exitcodes import EXIT_OK, EXIT_USAGE
from orchestrator.templates.bundles import TEMPLATES, project_name
from protocol.endpoints import StateLayout

TEMPLATE_NAMES = sorted(TEMPLATES)


def _init(directory: Path, *argv: str) -> int:
    return main(["init", str(directory), *argv])


@pytest.mark.parametrize("template", TEMPLATE_NAMES)
def test_template_validates_and_names_the_swarm(tmp_path: Path, template: str) -> None:
    directory = tmp_path / "My Project"
    assert _init(directory, "--template", template) == EXIT_OK
    for rel in ("goondan.yaml", ".env.example", ".gitignore"):
        assert (directory / rel).is_file(), rel
    assert ".env" in (directory / ".gitignore").read_text().splitlines()
    bundle = load_bundle(directory, strict=True)
    assert bundle.swarm().name == "my-project"


@pytest.mark.parametrize("template", TEMPLATE_NAMES)
def test_scripted_tool_calls_name_tools_the_agent_has(tmp_path: Path, template: str) -> None:
    assert _init(tmp_path, "--template", template) == EXIT_OK
    bundle = load_bundle(tmp_path)
    for agent in bundle.of_kind(Kind.AGENT, user_only=True):
        model = refs.resolve_model(bundle, agent)
        assert model.spec.provider == "scripted"
        options = msgspec.convert(model.spec.options, ScriptedOptions)
        offered = {
            f"{tool.name}__{export.name}"
            for tool in refs.resolve_tools(bundle, agent)
            for export in tool.spec.exports
        }
        for rule in options.script:
            if rule.match is not None:
                re.compile(rule.match)
            assert {c.name for c in rule.tool_calls} <= offered, agent.name
            if rule.after_tool is not None:
                assert rule.after_tool in offered | {"*"}, agent.name


def _uncommented(text: str, provider: str) -> str:
    block = re.search(rf"^# >>> {provider}\n(.*?)^# <<< {provider}$", text, re.S | re.M)
    assert block is not None, provider
    return "\n".join(line[2:] if line.startswith("# ") else "" for line in block[1].splitlines())


@pytest.mark.parametrize("template", TEMPLATE_NAMES)
@pytest.mark.parametrize(
    ("provider", "env"), [("openai", "OPENAI_API_KEY"), ("anthropic", "ANTHROPIC_API_KEY")]
)
def test_commented_real_model_switch_validates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, template: str, provider: str, env: str
) -> None:
    assert _init(tmp_path, "--template", template) == EXIT_OK
    main_file = tmp_path / "goondan.yaml"
    text = main_file.read_text()
    model = TEMPLATES[template].model
    docs = text.split("\n---\n")
    index = next(i for i, d in enumerate(docs) if "kind: Model" in d and f"name: {model}\n" in d)
    docs[index] = _uncommented(text, provider)
    main_file.write_text("\n---\n".join(docs))
    monkeypatch.setenv(env, "sk-test")
    bundle = load_bundle(tmp_path, strict=True)
    switched = bundle.model(model)
    assert switched.spec.provider == provider
    assert switched.spec.api_key is not None


def test_env_example_names_the_keys_of_the_switch(tmp_path: Path) -> None:
    assert _init(tmp_path) == EXIT_OK
    keys = (tmp_path / ".env.example").read_text()
    assert "OPENAI_API_KEY=" in keys
    assert "ANTHROPIC_API_KEY=" in keys


def test_refuses_to_overwrite_and_names_the_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ".gitignore").write_text("mine\n")
    assert _init(tmp_path) == EXIT_USAGE
    err = capsys.readouterr().err
    assert str(tmp_path / ".gitignore") in err
    assert "--force" in err
    assert (tmp_path / ".gitignore").read_text() == "mine\n"
    assert not (tmp_path / "goondan.yaml").exists()  # nothing at all was written


def test_force_overwrites(tmp_path: Path) -> None:
    (tmp_path / "goondan.yaml").write_text("broken: [\n")
    assert _init(tmp_path, "--force", "--template", "minimal") == EXIT_OK
    load_bundle(tmp_path)


@pytest.mark.parametrize("option", ["--name", "--swarm"])
def test_name_option_names_swarm_and_package(tmp_path: Path, option: str) -> None:
    assert _init(tmp_path / "dir", option, "shop-bot") == EXIT_OK
    bundle = load_bundle(tmp_path / "dir")
    assert bundle.swarm().name == "shop-bot"
    assert [p.name for p in bundle.of_kind(Kind.PACKAGE, user_only=True)] == ["shop-bot"]


def test_bad_name_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _init(tmp_path, "--name", "has__separator") == EXIT_USAGE
    assert "--name" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("directory", "name"),
    [
        ("hello", "hello"),
        ("My Bot 2", "my-bot-2"),
        ("2fast", "fast"),
        ("___", "my-swarm"),
        ("a__b", "a-b"),
        ("x" * 80, "x" * 40),
    ],
)
def test_project_name(directory: str, name: str) -> None:
    assert project_name(directory) == name
    assert name_problem(name) is None


def test_a_directory_with_spaces_gets_a_quoted_cd_and_the_name_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init", "my bot"]) == 0
    out = capsys.readouterr().out
    assert "cd 'my bot' && goondan run" in out
    assert "the swarm is named 'my-bot' (from the directory 'my bot'" in out


def test_a_name_whose_swarm_already_has_state_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    StateLayout.from_env().swarm_instances_dir("taken").mkdir(parents=True)
    assert main(["init", str(tmp_path / "a"), "--name", "taken"]) == 2
    err = capsys.readouterr().err
    assert "'taken' already has state" in err and not (tmp_path / "a").exists()
    assert main(["init", str(tmp_path / "a"), "--name", "taken", "--force"]) == 0


def test_the_multi_agent_real_model_switch_names_both_models(tmp_path: Path) -> None:
    assert _init(tmp_path, "--template", "multi-agent") == EXIT_OK
    footer = (tmp_path / "goondan.yaml").read_text().split("Using a real LLM")[1]
    assert "coordinator-model and worker-model" in footer
