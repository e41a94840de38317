"""MCP start failures (coded, naming the resource and the command), `required: false`, and the
pure parts of the bridge: names, result conversion, backoff."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any

import mcp.types as mt
import psutil
import pytest

from agent_process.mcp.connection import Backoff, describe_exception
from agent_process.mcp.tools import export_name, output_of
from agent_process.runtime import StartFailure
from bundles.loader import inspect_bundle
from bundles.sdk import ToolFailed
from protocol.errors import ErrorCode
from tests.unit.agent_process import builders as b
from tests.unit.agent_process.helpers import make_runtime
from tests.unit.bundles.conftest import VALID_TAIL, write_bundle

SERVER = str(Path(__file__).resolve().parents[2] / "fixtures" / "mcp" / "server.py")
TOOL_DOC = "kind: Tool\nmetadata: {name: t}\nspec:\n  mcp: "


def tool(name: str, **mcp: Any) -> Any:
    return b.resource("Tool", name, {"mcp": mcp})


async def start_failure(*resources: Any, tools: list[str]) -> StartFailure:
    with pytest.raises(StartFailure) as caught:
        await make_runtime(b.scripted(), b.agent(tools=tools), *resources)
    return caught.value


def no_children() -> bool:
    return not [p for p in psutil.Process().children(recursive=True) if p.status() != "zombie"]


async def test_a_command_that_does_not_exist_is_E_TOOL_MCP_naming_tool_and_command() -> None:
    failure = await start_failure(
        tool("search", command="no-such-mcp-server-xyz"), tools=["search"]
    )
    assert failure.error.code == ErrorCode.E_TOOL_MCP
    assert "Tool 'search'" in failure.error.message
    assert "no-such-mcp-server-xyz" in failure.error.message
    assert failure.error.suggestion is not None and "required: false" in failure.error.suggestion


async def test_a_server_that_exits_before_the_handshake_is_E_TOOL_MCP() -> None:
    bad = tool("calc", command=sys.executable, args=[SERVER, "--fail-start"])
    failure = await start_failure(bad, tools=["calc"])
    assert failure.error.code == ErrorCode.E_TOOL_MCP
    assert "Tool 'calc'" in failure.error.message and "--fail-start" in failure.error.message
    assert no_children()


async def test_a_failing_server_closes_the_servers_that_started() -> None:
    good = tool("calc", command=sys.executable, args=[SERVER])
    bad = tool("broken", command=sys.executable, args=[SERVER, "--fail-start"])
    failure = await start_failure(good, bad, tools=["calc", "broken"])
    assert "Tool 'broken'" in failure.error.message
    assert no_children()


async def test_required_false_starts_the_agent_without_that_servers_tools() -> None:
    good = tool("calc", command=sys.executable, args=[SERVER])
    bad = tool("broken", command="no-such-mcp-server-xyz", required=False)
    rt = await make_runtime(b.scripted(), b.agent(tools=["calc", "broken"]), good, bad)
    try:
        assert "calc__add" in rt.tool_names
        assert not [n for n in rt.tool_names if n.startswith("broken__")]
    finally:
        await rt.close()
    assert no_children()


async def test_a_missing_env_secret_is_a_coded_config_error() -> None:
    env = {"TOKEN": {"valueFrom": {"env": "GOONDAN_TEST_UNSET_VARIABLE"}}}
    bad = tool("calc", command=sys.executable, args=[SERVER], env=env)
    failure = await start_failure(bad, tools=["calc"])
    assert failure.error.code == ErrorCode.E_CONFIG_VALUE_SOURCE
    assert "GOONDAN_TEST_UNSET_VARIABLE" in failure.error.message


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("add", "add"),
        ("search.web", "search_web"),
        ("a__b", "a_b"),
        ("get/user info", "get_user_info"),
        ("_x", "x"),
        ("9lives", None),
        ("...", None),
    ],
)
def test_export_names_are_sanitised_or_refused(name: str, expected: str | None) -> None:
    assert export_name(name) == expected


def test_structured_content_is_preferred_over_the_text_blocks() -> None:
    result = mt.CallToolResult(
        content=[mt.TextContent(type="text", text='{"n": 1}')], structured_content={"n": 1}
    )
    assert output_of(result) == {"n": 1}


def test_blocks_that_are_not_text_are_described_not_inlined() -> None:
    data = base64.b64encode(b"\x89PNG....").decode()
    result = mt.CallToolResult(
        content=[
            mt.TextContent(type="text", text="a chart:"),
            mt.ImageContent(type="image", data=data, mime_type="image/png"),
        ]
    )
    text = output_of(result)
    assert text.startswith("a chart:\n[image image/png,") and data not in text


def test_an_error_result_raises_a_coded_tool_failure() -> None:
    result = mt.CallToolResult(content=[mt.TextContent(type="text", text="nope")], is_error=True)
    with pytest.raises(ToolFailed) as caught:
        output_of(result)
    assert caught.value.code == ErrorCode.E_TOOL_MCP and caught.value.message == "nope"


def test_backoff_doubles_from_half_a_second_and_is_capped() -> None:
    delays = [Backoff().delay(n) for n in range(9)]
    assert delays[:4] == [0.5, 1.0, 2.0, 4.0]
    assert delays[-1] == 30.0 and max(delays) == 30.0


def test_grouped_exceptions_are_described_by_the_innermost_one() -> None:
    group = ExceptionGroup("outer", [ExceptionGroup("inner", [OSError("pipe broke")])])
    assert describe_exception(group) == "OSError: pipe broke"


@pytest.mark.parametrize(
    ("mcp", "field", "message"),
    [
        ("{command: x, timeoutMs: 0}", "spec.mcp.timeoutMs", "timeoutMs must be >= 1"),
        ("{command: x}\n  entry: ./tool.py", "spec.entry", "not both"),
    ],
    ids=["timeout", "entry-and-mcp"],
)
def test_bundle_validation_of_mcp_tools(tmp_path: Path, mcp: str, field: str, message: str) -> None:
    write_bundle(tmp_path, VALID_TAIL + "---\napiVersion: goondan.ai/v1\n" + TOOL_DOC + mcp + "\n")
    (tmp_path / "tool.py").write_text("handlers = {}\n")
    errors = inspect_bundle(tmp_path, packages=[]).errors
    assert [(e.code, e.path.split(" ")[-1]) for e in errors] == [
        (ErrorCode.E_CONFIG_SCHEMA_INVALID, field)
    ]
    assert message in errors[0].message


def test_required_false_and_exports_are_valid_on_an_mcp_tool(tmp_path: Path) -> None:
    mcp = "{command: x, required: false}\n  exports: [{name: add}]"
    write_bundle(tmp_path, VALID_TAIL + "---\napiVersion: goondan.ai/v1\n" + TOOL_DOC + mcp + "\n")
    assert inspect_bundle(tmp_path, packages=[]).errors == []
