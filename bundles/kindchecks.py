"""Checks that look at one resource alone: Model providers and scripts, Tool names, schemas and
entries, Extension and Connector entries. Cross-resource checks are in `bundles.validate`."""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import msgspec

from bundles.convert import error_location
from bundles.diagnostics import closest
from bundles.kinds import (
    ApprovalSpec,
    ConnectorSpec,
    ExtensionSpec,
    Kind,
    McpServer,
    ModelSpec,
    ScriptedOptions,
    ToolExport,
    ToolSpec,
)
from bundles.model import Resource
from bundles.naming import name_problem, tool_name_problem
from bundles.paths import PathProblem, entry_target, file_inside
from bundles.reporter import Reporter
from protocol.errors import ErrorCode

PROVIDERS = ("openai", "anthropic", "scripted")
_SCHEMA = ErrorCode.E_CONFIG_SCHEMA_INVALID


def check_entry(rep: Reporter, res: Resource[Any], entry: str) -> None:
    try:
        entry_target(res.root, entry)
    except PathProblem as problem:
        rep.failure(res, ("spec", "entry"), problem)


def check_model(rep: Reporter, res: Resource[ModelSpec]) -> None:
    spec = res.spec
    if spec.provider not in PROVIDERS:
        near = closest(spec.provider, PROVIDERS, limit=1)
        rep.error(
            res,
            ("spec", "provider"),
            _SCHEMA,
            f"unknown provider {spec.provider!r} (field spec.provider)",
            f"did you mean {near[0]}?" if near else "use one of " + ", ".join(PROVIDERS),
        )
    if not spec.model:
        rep.error(res, ("spec", "model"), _SCHEMA, "spec.model is empty", "name the model")
    if spec.provider == "scripted":
        _check_script(rep, res)


def _check_script(rep: Reporter, res: Resource[ModelSpec]) -> None:
    try:
        options = msgspec.convert(res.spec.options, ScriptedOptions)
    except msgspec.ValidationError as exc:
        message, rel = error_location(str(exc))
        rep.error(
            res,
            ("spec", "options", *rel),
            _SCHEMA,
            f"scripted model options: {message}",
            "options take script (a list of {match, afterTool, reply, toolCalls}), "
            "scriptFile and defaultReply",
        )
        return
    for i, rule in enumerate(options.script):
        if rule.match is None:
            continue
        try:
            re.compile(rule.match)
        except re.error as exc:
            rep.error(
                res,
                ("spec", "options", "script", i, "match"),
                _SCHEMA,
                f"script rule {i}: invalid regular expression: {exc}",
                "fix the regex (Python `re` syntax)",
            )
    if options.script_file is not None:
        try:
            file_inside(res.root, options.script_file, what="scriptFile")
        except PathProblem as problem:
            rep.failure(res, ("spec", "options", "scriptFile"), problem)


def check_tool(rep: Reporter, res: Resource[ToolSpec]) -> None:
    spec = res.spec
    if spec.error_message_limit < 1:
        rep.error(res, ("spec", "errorMessageLimit"), _SCHEMA, "errorMessageLimit must be >= 1")
    if not spec.exports and spec.mcp is None:
        rep.error(
            res, ("spec", "exports"), _SCHEMA, "a Tool needs at least one export",
            "add spec.exports: [{name, description, parameters}]",
        )  # fmt: skip
    seen: dict[str, int] = {}
    for i, export in enumerate(spec.exports):
        if export.name in seen:
            rep.error(
                res,
                ("spec", "exports", i, "name"),
                ErrorCode.E_CONFIG_DUPLICATE_NAME,
                f"export {export.name!r} is declared twice (exports[{seen[export.name]}] and "
                f"exports[{i}])",
                "rename or remove one of them",
            )
        seen.setdefault(export.name, i)
        _check_export(rep, res, i, export)
    deferred_only = bool(spec.exports) and all(e.deferred is not None for e in spec.exports)
    if spec.entry is not None:
        check_entry(rep, res, spec.entry)
    elif spec.mcp is None and not deferred_only:
        rep.error(
            res,
            ("spec", "entry"),
            _SCHEMA,
            "spec.entry is required (unless the tool declares mcp or only deferred exports)",
            "set entry to a Python file of the bundle, e.g. ./tools/my_tool.py",
        )
    if spec.mcp is not None:
        check_mcp(rep, res, spec.mcp)


def _check_export(rep: Reporter, res: Resource[ToolSpec], i: int, export: ToolExport) -> None:
    path = ("spec", "exports", i)
    problem = name_problem(export.name) or tool_name_problem(res.name, export.name)
    if problem:
        rep.error(
            res, (*path, "name"), ErrorCode.E_CONFIG_INVALID_NAME, problem,
            "use a shorter name of letters, digits, '-' and '_' without '__'",
        )  # fmt: skip
    for field, schema in (
        ("parameters", export.parameters),
        ("resultSchema", export.result_schema),
    ):
        if schema is not None:
            _check_schema(rep, res, (*path, field), schema)
    if isinstance(export.approval, ApprovalSpec):
        _check_approval(rep, res, path, export)
    if export.approval is not None and export.deferred is not None:
        rep.error(
            res, (*path, "approval"), _SCHEMA,
            "approval on a deferred export: a client-side call never runs here, so there is "
            "nothing to approve", "remove approval, or make the export run a handler",
        )  # fmt: skip
    if export.parameters.get("type") != "object":
        rep.error(
            res, (*path, "parameters"), _SCHEMA,
            "export parameters must be a JSON Schema with `type: object`",
            "wrap the arguments in {type: object, properties: {...}}",
        )  # fmt: skip


def _check_approval(
    rep: Reporter, res: Resource[ToolSpec], path: tuple[str | int, ...], export: ToolExport
) -> None:
    approval = export.approval
    assert isinstance(approval, ApprovalSpec)
    if approval.when is not None:
        _check_schema(rep, res, (*path, "approval", "when"), approval.when)
    if approval.ttl_seconds is not None and approval.ttl_seconds <= 0:
        rep.error(
            res, (*path, "approval", "ttlSeconds"), _SCHEMA,
            f"approval.ttlSeconds must be > 0 (got {approval.ttl_seconds})",
            "give the seconds a person has to decide, or leave it out for the Swarm's "
            "deferredTtlSeconds",
        )  # fmt: skip


def _check_schema(
    rep: Reporter, res: Resource[Any], path: tuple[str | int, ...], schema: dict[str, Any]
) -> None:
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        inner = tuple(p for p in exc.path if isinstance(p, str | int))
        rep.error(
            res,
            (*path, *inner),
            _SCHEMA,
            f"not a valid JSON Schema (Draft 2020-12): {exc.message[:300]}",
            "fix the schema; see https://json-schema.org/understanding-json-schema/",
        )
    except RecursionError:
        rep.error(res, path, _SCHEMA, "JSON Schema is nested too deeply")


def check_mcp(rep: Reporter, res: Resource[Any], mcp: McpServer) -> None:
    if (mcp.command is None) == (mcp.url is None):
        rep.error(
            res,
            ("spec", "mcp"),
            _SCHEMA,
            "mcp needs exactly one of command (stdio) or url (streamable HTTP)",
            "set `command` (and `args`) for a local server or `url` for a remote one",
        )
    if mcp.timeout_ms < 1:
        rep.error(res, ("spec", "mcp", "timeoutMs"), _SCHEMA, "mcp.timeoutMs must be >= 1")
    if res.kind is Kind.TOOL and res.spec.entry is not None:
        rep.error(
            res, ("spec", "entry"), _SCHEMA,
            "a Tool takes its tools from spec.entry or from spec.mcp, not both",
            "split it into two Tool resources; with mcp, exports is the allow-list of the "
            "server's tool names",
        )  # fmt: skip


def check_extension(rep: Reporter, res: Resource[ExtensionSpec]) -> None:
    if res.spec.entry is not None:
        check_entry(rep, res, res.spec.entry)
    elif res.spec.mcp is None:
        rep.error(
            res, ("spec", "entry"), _SCHEMA, "spec.entry is required (unless mcp is set)",
            "set entry to a Python file exporting register(api)",
        )  # fmt: skip
    if res.spec.mcp is not None:
        check_mcp(rep, res, res.spec.mcp)


def check_connector(rep: Reporter, res: Resource[ConnectorSpec]) -> None:
    check_entry(rep, res, res.spec.entry)
    seen: set[str] = set()
    for i, event in enumerate(res.spec.events):
        if event.name in seen:
            rep.error(
                res, ("spec", "events", i, "name"), ErrorCode.E_CONFIG_DUPLICATE_NAME,
                f"event {event.name!r} is declared twice", "rename or remove one of them",
            )  # fmt: skip
        seen.add(event.name)
