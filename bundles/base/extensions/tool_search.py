"""`tool-search`: the model searches the tools and selects which ones it will see next.

With many tools, sending every schema on every step costs tokens and confuses the model. This
extension narrows each step's catalog to: its own `tool-search__search` tool, the tools named
in `alwaysInclude`, and the tools the model selected. `search{query, select?, clear?}` ranks
the agent's tools (every item of the default catalog) by the query's words in their names
(weight 3) and descriptions (weight 1) and returns at most `maxResults` (default 10) with
their descriptions; `select` (full names like `bash__exec`, or resource names like `bash` for
every export) makes tools available from the next step on.

The selection is kept in the extension's state (`extensions/tool-search.json`), so it survives
turns and restarts; at most `maxSelected` (default 20) tools stay selected, the oldest
selections dropping first. With `resetEachTurn: true` every turn starts from none.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from bundles.sdk import (
    ExtensionApi,
    JsonObject,
    StepMiddlewareContext,
    ToolContext,
    TurnMiddlewareContext,
)

DESCRIPTION = (
    "Find tools by what they do and make them available. Only a few tools are shown at a time: "
    "search with words describing the task (e.g. 'read file', 'http request'), then pass the "
    "names you need in select; they can be called from your next step on."
)
PARAMETERS: JsonObject = {
    "type": "object",
    "additionalProperties": False,
    "required": ["query"],
    "properties": {
        "query": {
            "type": "string",
            "description": "Words describing the tools you need, e.g. 'write file' ('*': all).",
        },
        "select": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Tool names (bash__exec) or tool groups (bash) to make available.",
        },
        "clear": {
            "type": "boolean",
            "description": "Drop the current selection before selecting (default false).",
        },
    },
}
_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def _matches(selector: str, name: str) -> bool:
    return name == selector or name.startswith(selector + "__")


class Settings:
    __slots__ = ("always", "max_results", "max_selected", "reset_each_turn")

    def __init__(self, config: Mapping[str, Any]) -> None:
        always = config.get("alwaysInclude", [])
        if not isinstance(always, list) or not all(isinstance(n, str) for n in always):
            raise ValueError("config alwaysInclude must be a list of tool names")
        self.always: tuple[str, ...] = tuple(always)
        self.max_results = int(config.get("maxResults", 10))
        self.max_selected = int(config.get("maxSelected", 20))
        if self.max_results < 1 or self.max_selected < 1:
            raise ValueError("config maxResults and maxSelected must be positive")
        self.reset_each_turn = bool(config.get("resetEachTurn", False))


def rank(query: str, tools: Mapping[str, str], limit: int) -> list[tuple[str, int]]:
    """(name, score) of the best matches, best first (pure); '*' lists every tool."""
    if query.strip() == "*":
        return [(name, 0) for name in sorted(tools)][:limit]
    wanted = _words(query)
    scored = []
    for name, description in tools.items():
        name_words, text_words = _words(name.replace("__", " ")), _words(description)
        score = sum(3 * (w in name_words) + (w in text_words) for w in wanted)
        score += 10 * (query.strip() == name)
        if score > 0:
            scored.append((name, score))
    scored.sort(key=lambda item: (-item[1], item[0]))
    return scored[:limit]


class ToolSearch:
    def __init__(self, api: ExtensionApi, settings: Settings) -> None:
        self.api = api
        self.settings = settings
        self.known: dict[str, str] = {}
        """Name -> description of every tool of the default catalog (seen at each step)."""
        self.own_name = api.tools.register(
            "search", self.search, description=DESCRIPTION, parameters=PARAMETERS
        )

    @property
    def selected(self) -> list[str]:
        value = self.api.state.get().get("selected", [])
        return [n for n in value if isinstance(n, str)] if isinstance(value, list) else []

    def _shown(self, name: str) -> bool:
        return (
            name == self.own_name
            or any(_matches(s, name) for s in self.settings.always)
            or name in self.selected
        )

    async def turn(self, ctx: TurnMiddlewareContext) -> Any:
        if self.settings.reset_each_turn:
            self.api.state.set({"selected": []})
        return await ctx.next()

    async def step(self, ctx: StepMiddlewareContext) -> Any:
        self.known = {item.name: item.description for item in ctx.tool_catalog}
        ctx.tool_catalog[:] = [item for item in ctx.tool_catalog if self._shown(item.name)]
        return await ctx.next()

    def _select(self, selectors: list[str], clear: bool) -> tuple[list[str], list[str]]:
        """Apply `select`; returns (newly selected, unknown selectors)."""
        current = [] if clear else self.selected
        added: list[str] = []
        unknown: list[str] = []
        for selector in selectors:
            names = [n for n in self.known if _matches(selector, n) and n != self.own_name]
            if not names:
                unknown.append(selector)
            for name in names:
                if name in current:
                    current.remove(name)  # re-selecting refreshes it: it is dropped last
                current.append(name)
                added.append(name)
        current = current[-self.settings.max_selected :]
        self.api.state.set({**self.api.state.get(), "selected": current})
        return added, unknown

    async def search(self, ctx: ToolContext, input: JsonObject) -> JsonObject:
        others = {n: d for n, d in self.known.items() if n != self.own_name}
        found = rank(str(input["query"]), others, self.settings.max_results)
        added, unknown = self._select(list(input.get("select") or []), bool(input.get("clear")))
        selected = self.selected
        result: JsonObject = {
            "results": [
                {"name": n, "description": others[n][:300], "selected": n in selected}
                for n, _score in found
            ],
            "selected": selected,
        }
        if added:
            result["note"] = "Selected tools can be called from your next step on."
        if unknown:
            result["unknown"] = unknown
        return result


def register(api: ExtensionApi, config: Mapping[str, Any]) -> None:
    tool_search = ToolSearch(api, Settings(config))
    api.pipeline.register("turn", tool_search.turn)
    api.pipeline.register("step", tool_search.step)
