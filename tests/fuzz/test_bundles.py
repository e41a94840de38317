"""Mutated bundles go in, only coded `BundleError`s come out: no other exception, no hang
(the bundle loader fuzzed in process: no daemon).

Hangs are excluded by construction (node budget, depth limit, size limits), not by a timer:
the alias bombs below would take hours and gigabytes without those limits.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bundles.diagnostics import BundleError
from bundles.loader import load_bundle
from protocol.errors import ErrorCode
from tests.unit.bundles.conftest import FIXTURES

SEEDS = [p.read_text() for p in sorted(FIXTURES.glob("*/goondan.yaml"))]
VALID = (FIXTURES / "valid" / "goondan.yaml").read_text()
TOKENS = [
    "\n", " ", "  ", ":", "- ", "---\n", "...\n", "&a ", "*a", "<<: *a\n", "!!str ", "!!binary ",
    "!!python/object:os.system ", "{", "}", "[", "]", "'", '"', "#", "|\n", ">\n", "? ", "\t",
    "null", "~", "1e999", "-1", "0x1F", "2001-01-01", "apiVersion: goondan.ai/v1\n",
    "kind: Tool\n", "kind: Package\n", "metadata: {name: x}\n", "spec: {}\n", "Tool/", "/",
    "ref: ", "selector: {}", "overrides: {spec: {entry: ../x}}", "valueFrom: {env: X}", "\x00",
    "\ufeff", "é", "__", "entry: /etc/passwd\n", "entry: ../../x.py\n",
]  # fmt: skip


@st.composite
def mutated(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 6))):
        pos = draw(st.integers(0, len(text)))
        op = draw(st.sampled_from(["insert", "delete", "replace", "dup-line"]))
        if op == "insert":
            piece = draw(st.sampled_from(TOKENS) | st.text(max_size=8))
            text = text[:pos] + piece + text[pos:]
        elif op == "delete":
            text = text[:pos] + text[pos + draw(st.integers(1, 40)) :]
        elif op == "replace":
            text = text[:pos] + draw(st.characters()) + text[pos + 1 :]
        else:
            lines = text.splitlines(keepends=True) or [""]
            i = draw(st.integers(0, len(lines) - 1))
            text = "".join(lines[: i + 1] + lines[i:])
    return text


@st.composite
def alias_bomb(draw: st.DrawFn) -> str:
    width = draw(st.integers(2, 12))
    levels = draw(st.integers(2, 14))
    lines = ["a0: &a0 [" + ",".join(["x"] * width) + "]"]
    for i in range(1, levels):
        use_map = draw(st.booleans())
        refs = [f"*a{i - 1}"] * width
        body = (
            "{" + ", ".join(f"k{j}: {r}" for j, r in enumerate(refs)) + "}"
            if use_map
            else "[" + ",".join(refs) + "]"
        )
        lines.append(f"a{i}: &a{i} {body}")
    doc = "\n".join(lines) + "\n"
    return draw(st.sampled_from(SEEDS)) + "---\n" + doc


def _assert_only_coded_errors(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "goondan.yaml").write_bytes(raw)
        diagnostics = []
        try:
            load_bundle(root, packages=[])
        except BundleError as exc:
            diagnostics = exc.diagnostics
            assert diagnostics, "a BundleError always carries its diagnostics"
        for diag in diagnostics:
            assert isinstance(diag.code, ErrorCode)
            assert diag.code.startswith("E_CONFIG_")
            assert diag.path.startswith("goondan.yaml")
            assert diag.message


# `make fuzz` raises these through FUZZ_BUNDLE_EXAMPLES (the short run in `make test` keeps 150).
EXAMPLES = int(os.environ.get("FUZZ_BUNDLE_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(mutated())
def test_mutated_bundles_raise_only_bundle_errors(text: str) -> None:
    _assert_only_coded_errors(text.encode("utf-8", errors="surrogatepass"))


@settings(
    max_examples=max(40, EXAMPLES // 4),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(alias_bomb())
def test_alias_bombs_raise_only_bundle_errors(text: str) -> None:
    _assert_only_coded_errors(text.encode())


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes_raise_only_bundle_errors(raw: bytes) -> None:
    _assert_only_coded_errors(raw)


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=12)
    | st.sampled_from(
        ["Tool/t", "Agent/main", "Model/fake", "object", "string", "../x", "(", "$ref"]
    )
)
_KEYS = st.sampled_from(
    ["type", "properties", "ref", "selector", "overrides", "spec", "metadata", "kind", "name",
     "matchLabels", "entry", "exports", "parameters", "value", "valueFrom", "env", "secretRef",
     "script", "match", "reply", "options", "labels", "pattern", "enum", "required", "items"]
) | st.text(max_size=6)  # fmt: skip
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=25,
)


@st.composite
def structured(draw: st.DrawFn) -> str:
    """Valid envelopes whose spec fields hold random values of random types."""
    kind = draw(st.sampled_from(["Model", "Agent", "Swarm", "Tool", "Extension", "Connector",
                                 "Connection", "Package"]))  # fmt: skip
    spec = {
        "Model": {"provider": "scripted", "model": "m", "options": draw(_VALUES)},
        "Agent": {"modelConfig": {"modelRef": "Model/fake"}, "tools": draw(_VALUES)},
        "Swarm": {"entryAgent": draw(_VALUES), "agents": draw(_VALUES)},
        "Tool": {"entry": "./t.py", "exports": [{"name": "x", "parameters": draw(_VALUES)}]},
        "Extension": {"entry": draw(_VALUES)},
        "Connector": {"entry": "./c.py", "events": draw(_VALUES)},
        "Connection": {"connectorRef": draw(_VALUES), "secrets": draw(_VALUES)},
        "Package": draw(_VALUES),
    }[kind]
    if draw(st.booleans()):
        spec = {**spec, draw(_KEYS): draw(_VALUES)} if isinstance(spec, dict) else spec
    doc = {"apiVersion": "goondan.ai/v1", "kind": kind, "metadata": {"name": "x"}, "spec": spec}
    agent_tools = {"tools": [{"selector": draw(_VALUES), "overrides": draw(_VALUES)}]}
    agent = {
        "apiVersion": "goondan.ai/v1",
        "kind": "Agent",
        "metadata": {"name": "sel"},
        "spec": {"modelConfig": {"modelRef": "Model/fake"}, **agent_tools},
    }
    return VALID + "\n---\n" + yaml.safe_dump_all([doc, agent])


@FUZZ
@given(structured())
def test_random_spec_values_raise_only_bundle_errors(text: str) -> None:
    _assert_only_coded_errors(text.encode())
