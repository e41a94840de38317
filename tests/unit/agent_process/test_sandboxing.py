"""`Tool.spec.sandbox` from the bundle to `ctx.config["sandbox"]`: its forms, what it hides,
the warning of `sandbox: off`, and the coded error of a bad value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from structlog.testing import capture_logs

from agent_process import sandboxing
from bundles.kinds import ToolSpec
from bundles.loader import inspect_bundle
from bundles.model import Bundle, Resource
from protocol.endpoints import StateLayout
from protocol.errors import ErrorCode
from tests.unit.bundles.conftest import VALID_TAIL, write_bundle

TOOL = "apiVersion: goondan.ai/v1\nkind: Tool\nmetadata: {name: t}\nspec:\n  entry: ./tool.py\n"


def _spec(sandbox: Any) -> ToolSpec:
    return msgspec.convert({"exports": [{"name": "x"}], "sandbox": sandbox}, ToolSpec)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("auto", ("auto", True)),
        ("landlock", ("landlock", True)),
        (False, ("off", True)),  # YAML's reading of an unquoted `off`
        ("off", ("off", True)),
        (True, ("auto", True)),
        ({"mode": "bubblewrap", "network": False}, ("bubblewrap", False)),
        ({"mode": False}, ("off", True)),
        ({"network": {"allow": ["a.com", "*.b.org:8443"]}},
         ("auto", {"allow": ["a.com", "*.b.org:8443"]})),
    ],
)  # fmt: skip
def test_every_form_of_the_setting(given: Any, expected: tuple[str, Any]) -> None:
    assert sandboxing.mode_and_network(_spec(given)) == expected


def test_the_state_root_run_and_log_roots_and_env_files_are_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", "/run/credentials/goondan.service")
    layout = StateLayout(root=tmp_path / "st", run_root=Path("/run/g"), logs_root=None)
    bundle = Bundle(path=tmp_path / "b" / "goondan.yaml", root=tmp_path / "b")
    hidden = sandboxing.hidden_paths(bundle, layout, [Path("/etc/goondan/keys.env")])
    assert hidden == sorted(
        [str(tmp_path / "st"), "/run/g", str(tmp_path / "b" / ".env"),
         str(tmp_path / "b" / ".env.local"), "/etc/goondan/keys.env",
         "/run/credentials/goondan.service"]
    )  # fmt: skip


def test_sandbox_off_is_logged_and_the_config_carries_the_sandbox(tmp_path: Path) -> None:
    bundle_dir = tmp_path / "b"
    write_bundle(
        bundle_dir, VALID_TAIL + "---\n" + TOOL + "  sandbox: off\n  exports: [{name: x}]\n"
    )
    (bundle_dir / "tool.py").write_text("handlers = {'x': lambda ctx, i: i}\n")
    report = inspect_bundle(bundle_dir, packages=[])
    assert report.errors == [] and report.bundle is not None
    tool_res: Resource[ToolSpec] = next(r for r in report.bundle.resources if r.name == "t")
    with capture_logs() as logs:
        config = sandboxing.tool_config(tool_res, {"roots": ["."]}, ["/state"])
    assert config == {
        "roots": ["."], "sandbox": {"mode": "off", "network": True, "hide": ["/state"]},
    }  # fmt: skip
    assert next(e for e in logs if e["event"] == "sandbox_off")["tool"] == "t"


@pytest.mark.parametrize("value", ["chroot", "{mode: jail}", "3", "{mode: auto, net: 1}"])
def test_a_bad_value_is_a_coded_error_at_its_field(tmp_path: Path, value: str) -> None:
    write_bundle(tmp_path, VALID_TAIL + "---\n" + TOOL + f"  sandbox: {value}\n"
                 "  exports: [{name: x}]\n")  # fmt: skip
    (tmp_path / "tool.py").write_text("handlers = {}\n")
    errors = [(d.code, d.path.split(" ")[-1]) for d in inspect_bundle(tmp_path, packages=[]).errors]
    assert errors and errors[0][0] == ErrorCode.E_CONFIG_SCHEMA_INVALID
    assert errors[0][1].startswith("spec.sandbox")
