"""Checks of the cost controls: Model pricing, rate limits, fallback chains and recordings;
Agent and Swarm budgets (a dollar budget needs the price of every Model its agents may
call)."""

from __future__ import annotations

from typing import Any

from bundles.diagnostics import FieldPath
from bundles.kinds import AgentSpec, Budget, Kind, ModelSpec, SwarmSpec
from bundles.model import Bundle, Resource
from bundles.reporter import Reporter
from bundles.resolve import RefFailure, lookup, parse_ref, resolve_list
from protocol.errors import ErrorCode

_SCHEMA = ErrorCode.E_CONFIG_SCHEMA_INVALID


def _positive(rep: Reporter, res: Resource[Any], path: FieldPath, value: float | None) -> None:
    if value is not None and value <= 0:
        field = path[-1]
        rep.error(res, path, _SCHEMA, f"{field} must be > 0 (got {value})",
                  f"give a positive {field}, or leave it out for no limit")  # fmt: skip


def check_model(rep: Reporter, res: Resource[ModelSpec]) -> None:
    spec = res.spec
    if spec.pricing is not None:
        pricing = spec.pricing
        for field, value in (
            ("inputPerMTok", pricing.input_per_m_tok),
            ("outputPerMTok", pricing.output_per_m_tok),
            ("cachedInputPerMTok", pricing.cached_input_per_m_tok),
        ):
            if value is not None and value < 0:
                rep.error(res, ("spec", "pricing", field), _SCHEMA,
                          f"pricing.{field} must be >= 0 (got {value})",
                          "give the provider's price in US dollars per million tokens")  # fmt: skip
    if spec.rate_limit is not None:
        limit = spec.rate_limit
        _positive(rep, res, ("spec", "rateLimit", "requestsPerMinute"), limit.requests_per_minute)
        _positive(rep, res, ("spec", "rateLimit", "tokensPerMinute"), limit.tokens_per_minute)
    if spec.replay is not None and (spec.recording is not None or not spec.replay.strip()):
        rep.error(res, ("spec", "replay"), _SCHEMA,
                  "replay: DIR is an empty directory or is given with recording",
                  "keep one: `replay: DIR` is `recording: {mode: replay, dir: DIR}`")  # fmt: skip
    seen: set[str] = set()
    for i, ref in enumerate(spec.fallback):
        target = parse_ref(ref, expected=Kind.MODEL) if _parses(ref) else None
        if target is None:
            continue  # an unparseable ref is reported by the reference checks
        if target.name == res.name or target.name in seen:
            why = "itself" if target.name == res.name else f"Model/{target.name} twice"
            rep.error(res, ("spec", "fallback", i), ErrorCode.E_CONFIG_INVALID_REF,
                      f"the fallback chain of Model/{res.name} lists {why}",
                      "list each other Model once, in the order to try them")  # fmt: skip
        seen.add(target.name)


def _parses(ref: Any) -> bool:
    try:
        parse_ref(ref, expected=Kind.MODEL)
    except RefFailure:
        return False
    return True


def check_budget(
    rep: Reporter, bundle: Bundle, res: Resource[Any], path: FieldPath, budget: Budget | None
) -> None:
    if budget is None:
        return
    _positive(rep, res, (*path, "turnsPerDay"), budget.turns_per_day)
    _positive(rep, res, (*path, "tokensPerDay"), budget.tokens_per_day)
    _positive(rep, res, (*path, "costUsdPerDay"), budget.cost_usd_per_day)
    if budget.cost_usd_per_day is None:
        return
    agents: list[Resource[AgentSpec]] = [res] if res.kind is Kind.AGENT else _members(bundle, res)
    models = [m for a in agents for m in _models(bundle, a)]
    unpriced = sorted({m.name for m in models if m.spec.pricing is None})
    if unpriced:
        names = ", ".join(f"Model/{n}" for n in unpriced)
        rep.error(res, (*path, "costUsdPerDay"), _SCHEMA,
                  f"costUsdPerDay needs the price of every Model its agents use; {names} "
                  "has no spec.pricing",
                  "add spec.pricing: {inputPerMTok, outputPerMTok} to each, or budget turns "
                  "or tokens instead")  # fmt: skip


def _members(bundle: Bundle, swarm: Resource[SwarmSpec]) -> list[Resource[AgentSpec]]:
    try:
        return resolve_list(bundle, swarm.spec.agents, Kind.AGENT)
    except RefFailure:
        return []  # reported on the swarm itself


def _models(bundle: Bundle, agent: Resource[AgentSpec]) -> list[Resource[ModelSpec]]:
    """The agent's Model and its fallbacks; references that do not resolve are reported by
    the reference checks, not here."""
    found: list[Resource[ModelSpec]] = []
    try:
        model = lookup(bundle, parse_ref(agent.spec.model_config.model_ref, expected=Kind.MODEL),
                       from_package=agent.package)  # fmt: skip
    except RefFailure:
        return found
    found.append(model)
    for ref in model.spec.fallback:
        try:
            found.append(lookup(bundle, parse_ref(ref, expected=Kind.MODEL),
                                from_package=model.package))  # fmt: skip
        except RefFailure:
            continue
    return found


def check_fallback_refs(bundle: Bundle, res: Resource[ModelSpec], report: Any) -> None:
    """Each fallback names an existing Model (`report(res, path, failure)` says where not)."""
    for i, ref in enumerate(res.spec.fallback):
        try:
            lookup(bundle, parse_ref(ref, expected=Kind.MODEL), from_package=res.package)
        except RefFailure as failure:
            report(res, ("spec", "fallback", i), failure)
