"""Whole-bundle checks: unique names, references that resolve, swarms that make sense, and
value sources that have a value. Every problem becomes a diagnostic; nothing raises.

References are resolved with the very code the runtime uses (`bundles.resolve`), so a bundle
that validates cannot fail resolution later.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bundles import costchecks, credentials, kindchecks, limits
from bundles.credentials import Setting
from bundles.diagnostics import Collector, FieldPath
from bundles.kinds import (
    AgentSpec,
    ClusterPolicy,
    ConnectionSpec,
    Kind,
    ObjectRef,
    RefLike,
    SwarmSpec,
    ValueSource,
)
from bundles.model import Bundle, Resource
from bundles.paths import PathProblem, file_inside
from bundles.reporter import Reporter, SourceMap
from bundles.resolve import RefFailure, lookup, parse_ref, resolve_item, resolve_list
from bundles.values import ValueProblem, shape_problem, value_of
from protocol.errors import ErrorCode

__all__ = ["Checks", "Options", "SourceMap"]

MIN_LOG_FILE_BYTES = 4096
"""Smaller is a unit mistake (64 meant as MiB), and would rotate at every few lines."""
MAX_LOG_FILES_KEPT = 1000


@dataclass(frozen=True, slots=True)
class Options:
    state_root: Path | None = None
    require_swarm: bool = True
    broken: frozenset[tuple[Kind, str]] = frozenset()
    """Resources whose document had errors: references to them are not reported again."""
    incomplete: bool = False
    """A file could not be parsed at all: any missing reference may be in it."""


class Checks:
    def __init__(
        self, bundle: Bundle, sources: SourceMap, collector: Collector, options: Options
    ) -> None:
        self.bundle = bundle
        self.rep = Reporter(sources, collector)
        self.options = options
        self.secrets: set[str] = set()

    def run(self) -> frozenset[str]:
        """Run every check; returns the bundle's secrets (`bundles.credentials`), for
        redaction and for keeping them from child processes."""
        self._duplicates()
        self._swarm_present()
        for res in self.bundle.resources:
            self._check(res)
        return frozenset(self.secrets)

    def _check(self, res: Resource[Any]) -> None:
        match res.kind:
            case Kind.MODEL:
                kindchecks.check_model(self.rep, res)
                costchecks.check_model(self.rep, res)
                costchecks.check_fallback_refs(self.bundle, res, self._report)
            case Kind.TOOL:
                kindchecks.check_tool(self.rep, res)
            case Kind.EXTENSION:
                kindchecks.check_extension(self.rep, res)
            case Kind.CONNECTOR:
                kindchecks.check_connector(self.rep, res)
            case Kind.AGENT:
                self._agent(res)
            case Kind.SWARM:
                self._swarm(res)
            case Kind.CONNECTION:
                self._connection(res)
            case Kind.PACKAGE:
                pass
        for item in _settings(res):
            self._setting(res, item)

    # -- names -----------------------------------------------------------------------------

    def _duplicates(self) -> None:
        first: dict[tuple[str | None, Kind, str], Resource[Any]] = {}
        for res in self.bundle.resources:
            key = (res.package, res.kind, res.name)
            if key not in first:
                first[key] = res
                continue
            other = self.rep.where(first[key], ("metadata", "name"))
            self.rep.error(
                res,
                ("metadata", "name"),
                ErrorCode.E_CONFIG_DUPLICATE_NAME,
                f"{res.kind} {res.name!r} is defined twice (first at {other})",
                "rename one of them; names are unique per kind",
            )

    def _swarm_present(self) -> None:
        if not self.options.require_swarm or self.options.incomplete:
            return
        if any(self.bundle.of_kind(Kind.SWARM, user_only=True)):
            return
        if any(kind is Kind.SWARM for kind, _ in self.options.broken):
            return
        self.rep.collector.error(
            ErrorCode.E_CONFIG_NO_SWARM,
            "the bundle declares no Swarm, so there is nothing to run",
            self.bundle.path.name,
            "add a Swarm with entryAgent and agents (see bundles/examples/hello)",
        )

    # -- references ------------------------------------------------------------------------

    def _report(self, res: Resource[Any], path: FieldPath, failure: RefFailure) -> None:
        # A missing target that failed its own checks was reported already: say it once.
        if failure.reported:
            return
        if failure.code is ErrorCode.E_CONFIG_REF_NOT_FOUND and (
            self.options.incomplete or failure.target in self.options.broken
        ):
            return
        self.rep.failure(res, path, failure)

    def _ref(
        self, res: Resource[Any], path: FieldPath, ref: str | ObjectRef, kind: Kind
    ) -> Resource[Any] | None:
        try:
            return lookup(self.bundle, parse_ref(ref, expected=kind), from_package=res.package)
        except RefFailure as failure:
            self._report(res, path, failure)
            return None

    def _items(
        self, res: Resource[Any], field: str, items: list[RefLike], kind: Kind
    ) -> list[Resource[Any]]:
        found: list[Resource[Any]] = []
        for i, item in enumerate(items):
            try:
                found += resolve_item(self.bundle, item, kind, from_package=res.package)
            except RefFailure as failure:
                self._report(res, ("spec", field, i), failure)
        return found

    def _agent(self, res: Resource[AgentSpec]) -> None:
        spec = res.spec
        self._ref(res, ("spec", "modelConfig", "modelRef"), spec.model_config.model_ref, Kind.MODEL)
        used = [
            *self._items(res, "tools", spec.tools, Kind.TOOL),
            *self._items(res, "extensions", spec.extensions, Kind.EXTENSION),
        ]
        own = {id(r) for r in self.bundle.resources}
        for overridden in (r for r in used if id(r) not in own):
            # `overrides: {spec: {config: {tokenEnv: X}}}` may bring credentials of its own;
            # problems of the resource itself are reported on it, once
            for item in _settings(overridden):
                self._setting(overridden, item, report=False)
        costchecks.check_budget(
            self.rep, self.bundle, res, ("spec", "policy", "budget"), spec.policy.budget
        )
        if spec.prompt.system_ref is not None:
            try:
                file_inside(res.root, spec.prompt.system_ref, what="systemRef")
            except PathProblem as problem:
                self.rep.failure(res, ("spec", "prompt", "systemRef"), problem)
        for field, message in limits.problems(spec.limits):
            self.rep.error(
                res, ("spec", "limits", field), ErrorCode.E_CONFIG_SCHEMA_INVALID, message,
                "fix the value or remove it (unset limits are not applied)",
            )  # fmt: skip

    def _swarm(self, res: Resource[SwarmSpec]) -> None:
        spec = res.spec
        if not spec.agents:
            self.rep.error(
                res, ("spec", "agents"), ErrorCode.E_CONFIG_SCHEMA_INVALID,
                "a Swarm needs at least one agent", "list its agents under spec.agents",
            )  # fmt: skip
        members = self._items(res, "agents", spec.agents, Kind.AGENT)
        entry = self._ref(res, ("spec", "entryAgent"), spec.entry_agent, Kind.AGENT)
        if entry is not None and members and entry.key not in {m.key for m in members}:
            self.rep.error(
                res,
                ("spec", "entryAgent"),
                ErrorCode.E_CONFIG_REF_NOT_FOUND,
                f"entryAgent {entry.name} is not one of the swarm's agents",
                f"add Agent/{entry.name} to spec.agents or choose one of: "
                + ", ".join(m.name for m in members),
            )
        self._policy(res)
        costchecks.check_budget(
            self.rep, self.bundle, res, ("spec", "policy", "budget"), spec.policy.budget
        )

    def _policy(self, res: Resource[SwarmSpec]) -> None:
        policy = res.spec.policy
        bad: list[tuple[FieldPath, str]] = []
        if policy.max_steps_per_turn < 1:
            bad.append((("maxStepsPerTurn",), "maxStepsPerTurn must be >= 1"))
        if policy.shutdown.grace_period_seconds < 0:
            bad.append((("shutdown", "gracePeriodSeconds"), "gracePeriodSeconds must be >= 0"))
        if policy.lifecycle.reconcile_interval_seconds <= 0:
            bad.append((("lifecycle", "reconcileIntervalSeconds"), "must be > 0"))
        if policy.max_live_instances is not None and policy.max_live_instances < 1:
            bad.append((("maxLiveInstances",), "maxLiveInstances must be >= 1"))
        idle = policy.lifecycle.idle_timeout_seconds
        if idle is not None and idle <= 0:
            bad.append((("lifecycle", "idleTimeoutSeconds"),
                        "must be > 0 (null keeps idle instances live)"))  # fmt: skip
        bad.extend(_cluster_problems(policy.cluster))
        self._metrics(res)
        self._logs(res)
        if res.spec.instance_key is not None and not res.spec.instance_key:
            self.rep.error(
                res,
                ("spec", "instanceKey"),
                ErrorCode.E_CONFIG_SCHEMA_INVALID,
                "instanceKey must not be empty",
                "remove it or give it a value",
            )
        for path, message in bad:
            self.rep.error(
                res,
                ("spec", "policy", *path),
                ErrorCode.E_CONFIG_SCHEMA_INVALID,
                message,
                "change the value",
            )

    def _logs(self, res: Resource[SwarmSpec]) -> None:
        logs = res.spec.observability.logs
        path: FieldPath = ("spec", "observability", "logs")
        if logs.max_file_bytes != 0 and logs.max_file_bytes < MIN_LOG_FILE_BYTES:
            self.rep.error(
                res, (*path, "maxFileBytes"), ErrorCode.E_CONFIG_SCHEMA_INVALID,
                f"maxFileBytes {logs.max_file_bytes} is below {MIN_LOG_FILE_BYTES}",
                "give a size in bytes (67108864 is 64 MiB), or 0 never to rotate",
            )  # fmt: skip
        if not 0 <= logs.keep_files <= MAX_LOG_FILES_KEPT:
            self.rep.error(res, (*path, "keepFiles"), ErrorCode.E_CONFIG_SCHEMA_INVALID,
                           f"keepFiles must be 0..{MAX_LOG_FILES_KEPT}",
                           "keep fewer rotated files (0 drops a file when it rotates)")  # fmt: skip

    def _metrics(self, res: Resource[SwarmSpec]) -> None:
        metrics = res.spec.observability.metrics
        if metrics is None:
            return
        path: FieldPath = ("spec", "observability", "metrics")
        if not 0 <= metrics.port <= 65535:
            self.rep.error(res, (*path, "port"), ErrorCode.E_CONFIG_SCHEMA_INVALID,
                           f"port {metrics.port} is not a TCP port",
                           "use 1-65535, or 0 for any free port")  # fmt: skip
        if not metrics.host.strip():
            self.rep.error(res, (*path, "host"), ErrorCode.E_CONFIG_SCHEMA_INVALID,
                           "host must not be empty", "use 127.0.0.1 (the default)")  # fmt: skip

    def _connection(self, res: Resource[ConnectionSpec]) -> None:
        spec = res.spec
        self._ref(res, ("spec", "connectorRef"), spec.connector_ref, Kind.CONNECTOR)
        swarm = self._connection_swarm(res)
        for i, rule in enumerate(spec.ingress.rules):
            path: FieldPath = ("spec", "ingress", "rules", i, "route")
            if rule.route.agent_ref is not None:
                agent = self._ref(res, (*path, "agentRef"), rule.route.agent_ref, Kind.AGENT)
                if agent is not None and swarm is not None:
                    self._in_swarm(res, (*path, "agentRef"), agent, swarm)
            if rule.route.instance_key is not None and rule.route.instance_key_property:
                self.rep.error(
                    res, path, ErrorCode.E_CONFIG_SCHEMA_INVALID,
                    "route sets both instanceKey and instanceKeyProperty",
                    "keep one: a fixed instanceKey or the event property to read it from",
                )  # fmt: skip
        approvers = spec.config.get("approvers")
        listed = approvers if isinstance(approvers, list) else [approvers]
        if any(isinstance(item, ValueSource) for item in listed):  # orchestrator/calls/auth.py
            self.rep.error(
                res, ("spec", "config", "approvers"), ErrorCode.E_CONFIG_SCHEMA_INVALID,
                "approvers are names (chat user ids or names, API token ids), not values read "
                "from elsewhere: the daemon reads them as written",
                'write them as strings: approvers: "7, ann" or [7, ann]',
            )  # fmt: skip

    def _connection_swarm(self, res: Resource[ConnectionSpec]) -> Resource[SwarmSpec] | None:
        if res.spec.swarm_ref is not None:
            return self._ref(res, ("spec", "swarmRef"), res.spec.swarm_ref, Kind.SWARM)
        return next(self.bundle.of_kind(Kind.SWARM, user_only=True), None)

    def _in_swarm(
        self,
        res: Resource[Any],
        path: FieldPath,
        agent: Resource[Any],
        swarm: Resource[SwarmSpec],
    ) -> None:
        try:
            members = resolve_list(self.bundle, swarm.spec.agents, Kind.AGENT)
        except RefFailure:
            return  # reported on the swarm itself
        if agent.key not in {m.key for m in members}:
            self.rep.error(
                res, path, ErrorCode.E_CONFIG_REF_NOT_FOUND,
                f"Agent/{agent.name} is not one of the agents of Swarm/{swarm.name}",
                f"add Agent/{agent.name} to the swarm's spec.agents or route to one of: "
                + ", ".join(m.name for m in members),
            )  # fmt: skip

    # -- value sources ---------------------------------------------------------------------

    def _setting(self, res: Resource[Any], item: Setting, *, report: bool = True) -> None:
        if item.literal is not None:
            self._secret(item.literal)
        elif item.source is not None:
            self._value(res, item, item.source, report=report)

    def _value(self, res: Resource[Any], item: Setting, vs: ValueSource, *, report: bool) -> None:
        path = item.path
        problem = shape_problem(vs)
        if problem is not None:
            if not report:
                return
            self.rep.error(
                res, path, ErrorCode.E_CONFIG_VALUE_SOURCE, problem.message, problem.suggestion
            )
            return
        try:
            value = value_of(self.bundle, vs, state_root=self.options.state_root)
        except ValueProblem as missing:
            if not report or (item.optional and missing.missing):
                return  # `tokenEnv: X` with X unset: the tool says so when it is called
            say = self.rep.warn if missing.missing else self.rep.error
            say(res, path, ErrorCode.E_CONFIG_VALUE_SOURCE, missing.message, missing.suggestion)
            return
        if item.secret:
            self._secret(value)

    def _secret(self, value: str) -> None:
        if value:
            self.secrets.add(value)


def _cluster_problems(cluster: ClusterPolicy) -> list[tuple[FieldPath, str]]:
    bad: list[tuple[FieldPath, str]] = []
    if not 1 <= cluster.partitions <= 4096:
        bad.append((("cluster", "partitions"), "partitions must be 1..4096"))
    if cluster.lease_ttl_seconds < 1:
        bad.append((("cluster", "leaseTtlSeconds"), "leaseTtlSeconds must be >= 1"))
    if not 1 <= cluster.replicas <= 5:
        bad.append((("cluster", "replicas"), "replicas must be 1..5 (JetStream's limit)"))
    if cluster.dedupe_window_seconds <= 0:
        bad.append((("cluster", "dedupeWindowSeconds"), "must be > 0"))
    return bad


def _settings(res: Resource[Any]) -> Iterator[Setting]:
    """The ValueSources and credentials of a resource (`bundles.credentials`), with their
    field paths and whether each value is a secret."""
    spec = res.spec
    if res.kind is Kind.MODEL and spec.api_key is not None:
        yield Setting(("spec", "apiKey"), True, source=spec.api_key)
    mcp = getattr(spec, "mcp", None) if res.kind in (Kind.TOOL, Kind.EXTENSION) else None
    if mcp is not None:
        for field in ("env", "headers"):
            yield from _typed(getattr(mcp, field), ("spec", "mcp", field))
    if res.kind in (Kind.TOOL, Kind.EXTENSION, Kind.CONNECTOR):
        for item in credentials.settings(spec.config):
            yield replace(item, path=("spec", "config", *item.path))
    if res.kind is Kind.CONNECTION:
        yield from _typed(spec.config, ("spec", "config"))
        for key, vs in spec.secrets.items():
            yield Setting(("spec", "secrets", key), True, source=vs)


def _typed(values: dict[str, Any], path: FieldPath) -> Iterator[Setting]:
    """A map whose values are strings or ValueSources, or lists of them (MCP env and headers,
    Connection config, e.g. the api connector's `tokens`): a secret by its name, or by coming
    from a secret file."""
    for key, value in values.items():
        listed = isinstance(value, list)
        named = credentials.is_credential_list_name if listed else credentials.is_credential_name
        credential = named(key)
        for index, item in enumerate(value if listed else [value]):
            at = (*path, key, index) if listed else (*path, key)
            if isinstance(item, ValueSource):
                secret = credential or credentials.is_secret_ref(item)
                yield Setting(at, secret, source=item)
            elif credential and isinstance(item, str):
                yield Setting(at, True, literal=item)
