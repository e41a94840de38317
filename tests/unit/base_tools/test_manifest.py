"""bundles/base/goondan.yaml: parses, matches the strict kinds, schemas are valid JSON Schema,
names follow ARCHITECTURE.md §6, and every export has a handler in its entry file (loaded by
path)."""

from __future__ import annotations

import re
from typing import Any

import msgspec
import pytest
import yaml
from jsonschema import Draft202012Validator

from bundles.kinds import API_VERSION, BASE_PACKAGE, ExtensionSpec, PackageSpec, ToolSpec
from bundles.loader import inspect_bundle

from .conftest import BASE, load_tool

NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
DOCS: list[dict[str, Any]] = list(yaml.safe_load_all((BASE / "goondan.yaml").read_text()))
TOOLS = [doc for doc in DOCS if doc["kind"] == "Tool"]
EXTENSIONS = [doc for doc in DOCS if doc["kind"] == "Extension"]
EXPORTS = [(tool, export) for tool in TOOLS for export in tool["spec"]["exports"]]


def _id(value: Any) -> str:
    return str(value["metadata"]["name"]) if "metadata" in value else str(value["name"])


def test_the_package_document_comes_first() -> None:
    package = DOCS[0]
    assert package["kind"] == "Package"
    assert package["metadata"]["name"] == BASE_PACKAGE
    msgspec.convert(package["spec"], PackageSpec)
    assert all(doc["apiVersion"] == API_VERSION for doc in DOCS)


def test_the_issue_tools_are_all_declared() -> None:
    declared = {
        tool["metadata"]["name"]: [e["name"] for e in tool["spec"]["exports"]] for tool in TOOLS
    }
    assert declared["bash"] == ["exec", "script"]
    assert declared["file-system"] == [
        "read",
        "write",
        "list",
        "mkdir",
        "search",
        "find",
        "edit",
        "create",
        "delete",
        "move",
    ]
    assert declared["http-fetch"] == ["get", "post"]
    assert declared["json-query"] == ["query", "pick", "count", "flatten"]
    assert declared["text-transform"] == ["replace", "slice", "split", "join", "trim", "case"]
    assert declared["wait"] == ["wait"]
    assert declared["self-restart"] == ["request"]
    assert declared["agents"] == ["request", "send", "spawn", "list", "catalog"]


@pytest.mark.parametrize("tool", TOOLS, ids=_id)
def test_tool_specs_fit_the_strict_kind(tool: dict[str, Any]) -> None:
    spec = msgspec.convert(tool["spec"], ToolSpec)
    assert spec.entry is not None
    assert (BASE / spec.entry).is_file()
    assert NAME.match(tool["metadata"]["name"])
    assert "__" not in tool["metadata"]["name"]


@pytest.mark.parametrize("tool", TOOLS, ids=_id)
def test_every_export_has_a_handler_and_no_handler_is_undeclared(tool: dict[str, Any]) -> None:
    module = load_tool(tool["spec"]["entry"])
    exports = {e["name"] for e in tool["spec"]["exports"]}
    assert set(module.handlers) == exports
    assert all(callable(handler) for handler in module.handlers.values())


def test_the_extensions_are_declared() -> None:
    names = [ext["metadata"]["name"] for ext in EXTENSIONS]
    assert names == [
        "logging",
        "message-window",
        "required-tools-guard",
        "message-compaction",
        "tool-search",
        "context-message",
    ]


@pytest.mark.parametrize("extension", EXTENSIONS, ids=_id)
def test_extension_specs_fit_the_kind_and_export_register(extension: dict[str, Any]) -> None:
    spec = msgspec.convert(extension["spec"], ExtensionSpec)
    assert spec.entry is not None
    module = load_tool(spec.entry)
    assert callable(module.register)


def _properties(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    found = list(schema.get("properties", {}).items())
    for _name, sub in list(found):
        if isinstance(sub.get("items"), dict) and sub["items"].get("type") == "object":
            found.extend(_properties(sub["items"]))
    return found


@pytest.mark.parametrize(
    ("tool", "export"), EXPORTS, ids=[f"{_id(t)}__{_id(e)}" for t, e in EXPORTS]
)
def test_export_schemas_and_names(tool: dict[str, Any], export: dict[str, Any]) -> None:
    full = f"{tool['metadata']['name']}__{export['name']}"
    assert NAME.match(export["name"])
    assert "__" not in export["name"]
    assert len(full) <= 64
    assert len(export["description"]) > 20
    schema = export["parameters"]
    Draft202012Validator.check_schema(schema)
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    for name, prop in _properties(schema):
        assert prop.get("description"), f"{full}: parameter {name} has no description"
    for name in schema.get("required", []):
        assert name in schema["properties"]


def test_the_package_loads_cleanly_with_the_bundle_loader() -> None:
    report = inspect_bundle(BASE / "goondan.yaml", require_swarm=False, packages=[])
    assert [d.code for d in report.errors] == []
    assert report.bundle is not None
