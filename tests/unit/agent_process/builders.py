"""Build a `bundles.model.Bundle` in memory from plain documents (camelCase, as in YAML).

The tests of the runtime do not depend on the YAML loader: each resource is converted with the
same strict Structs the loader uses, and paths resolve against tests/fixtures/runtime.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import msgspec

from bundles.kinds import SPEC_TYPES, Kind, Metadata
from bundles.model import Bundle, Resource, SourceLocation

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "runtime"


def resource(kind: str, name: str, spec: dict[str, Any], *, root: Path = FIXTURES) -> Resource[Any]:
    k = Kind(kind)
    return Resource(
        kind=k,
        metadata=Metadata(name=name),
        spec=msgspec.convert(spec, SPEC_TYPES[k]),
        location=SourceLocation(file=root / "goondan.yaml", line=1, document=0),
        root=root,
        raw={"kind": kind, "metadata": {"name": name}, "spec": copy.deepcopy(spec)},
    )


def bundle(*resources: Resource[Any], root: Path = FIXTURES) -> Bundle:
    return Bundle(path=root / "goondan.yaml", root=root, resources=list(resources))


def scripted(
    name: str = "m", script: list[dict[str, Any]] | None = None, **options: Any
) -> Resource[Any]:
    return resource(
        "Model",
        name,
        {"provider": "scripted", "model": name, "options": {"script": script or [], **options}},
    )


def agent(
    name: str = "a",
    *,
    model: str = "m",
    tools: list[str] | None = None,
    extensions: list[str] | None = None,
    system: str | None = "You are a test agent.",
) -> Resource[Any]:
    spec: dict[str, Any] = {
        "modelConfig": {"modelRef": f"Model/{model}"},
        "tools": [f"Tool/{t}" for t in tools or []],
        "extensions": [f"Extension/{e}" for e in extensions or []],
    }
    if system is not None:
        spec["prompt"] = {"system": system}
    return resource("Agent", name, spec)


def swarm(
    name: str = "s", *, agents: list[str], max_steps: int = 32, **policy: Any
) -> Resource[Any]:
    return resource(
        "Swarm",
        name,
        {
            "entryAgent": f"Agent/{agents[0]}",
            "agents": [f"Agent/{a}" for a in agents],
            "policy": {"maxStepsPerTurn": max_steps, **policy},
        },
    )


def tool(
    name: str, entry: str, exports: list[dict[str, Any]] | None = None, **spec: Any
) -> Resource[Any]:
    body: dict[str, Any] = {"entry": entry, **spec}
    if exports is not None:
        body["exports"] = exports
    return resource("Tool", name, body)


def extension(name: str, entry: str, config: dict[str, Any] | None = None) -> Resource[Any]:
    return resource("Extension", name, {"entry": entry, "config": config or {}})


OBJ = {"type": "object"}


def params(required: list[str] | None = None, **props: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": required or [],
        "additionalProperties": False,
    }
