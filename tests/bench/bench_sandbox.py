"""Benchmark: one `bash` call (`true`) in its bubblewrap sandbox against the same call with
`sandbox: off`, through the real handler of @goondan/base (loaded by path, as an agent does).

Both go through the same holder of the call's processes (the subreaper, or a cgroup where the
agent's is delegated), so the difference is what the sandbox adds: bubblewrap's namespaces,
mounts and exec. Variants alternate call by call, so the machine's drift hits both alike; the
cost row is the per-pair difference (sandboxed minus off). Goal of issue 27: ≤ 15 ms a call.
The Landlock fallback (a Python trampoline) is measured too where the kernel has Landlock,
and a network allow-list (`network: {allow}`: the proxy of the call in this process and the
forwarder started in the sandbox before the command) against the plain bubblewrap sandbox.

Run: `python -m tests.bench.bench_sandbox` (or via `python -m tests.bench`).
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import structlog

from tests.bench.baselines import Row, p99, print_rows

BASH = Path(__file__).resolve().parents[2] / "bundles" / "base" / "tools" / "bash.py"
CALLS = 200
WARMUP = 10


@dataclass
class _Context:
    workdir: Path
    config: dict[str, Any]
    secret_values: frozenset[str] = frozenset()
    runtime: Any = None
    message: dict[str, Any] = field(default_factory=dict)
    tool_call_id: str = "bench"
    agent_name: str = "bench"
    instance_key: str = "bench"
    logger: Any = field(default_factory=structlog.get_logger)


def _bash() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_bench_bash", BASH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def _call(bash: ModuleType, ctx: _Context) -> float:
    start = time.perf_counter()
    out = await bash.handlers["exec"](ctx, {"command": "true"})
    elapsed = (time.perf_counter() - start) * 1000
    assert out["exitCode"] == 0, out
    return elapsed


async def run() -> dict[str, list[float]]:
    bash = _bash()
    with tempfile.TemporaryDirectory(prefix="gsb", dir="/tmp") as tmp:
        state = Path(tmp) / "state"
        work = state / "instances" / "s" / "k" / "a" / "workdir"
        work.mkdir(parents=True)
        hide = {"hide": [str(state)]}
        allow = {"network": {"allow": ["api.github.com", "*.pypi.org"]}}
        variants = {
            "off": _Context(work, {"sandbox": {"mode": "off", **hide}}),
            "sandboxed": _Context(work, {"sandbox": {"mode": "bubblewrap", **hide}}),
            "allowlist": _Context(work, {"sandbox": {"mode": "bubblewrap", **allow, **hide}}),
        }
        if bash._sandbox._landlock.abi() >= 1:
            variants["landlock"] = _Context(work, {"sandbox": {"mode": "landlock", **hide}})
        out: dict[str, list[float]] = {name: [] for name in variants}
        async with asyncio.timeout(900):
            for _ in range(WARMUP):
                for ctx in variants.values():
                    await _call(bash, ctx)
            for _ in range(CALLS):
                for name, ctx in variants.items():
                    out[name].append(await _call(bash, ctx))
    return out


def main() -> list[Row]:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    samples = asyncio.run(run())
    base = statistics.median(samples["off"])
    cost = [s - o for s, o in zip(samples["sandboxed"], samples["off"], strict=True)]
    rows = [
        Row("bash `true`, sandbox: off", base, p99(samples["off"]), "ms", base),
        Row(
            "bash `true`, bubblewrap sandbox",
            statistics.median(samples["sandboxed"]),
            p99(samples["sandboxed"]),
            "ms",
            base,
        ),
        Row("sandbox cost per call (pairwise)", statistics.median(cost), p99(cost), "ms",
            goal="≤ 15 ms"),
    ]  # fmt: skip
    listed = samples["allowlist"]
    plain = statistics.median(samples["sandboxed"])
    extra = [a - s for a, s in zip(listed, samples["sandboxed"], strict=True)]
    rows += [
        Row("bash `true`, bubblewrap + network allow-list", statistics.median(listed),
            p99(listed), "ms", plain),
        Row("allow-list cost per call (pairwise)", statistics.median(extra), p99(extra), "ms"),
    ]  # fmt: skip
    if "landlock" in samples:
        landlock = samples["landlock"]
        rows.append(Row("bash `true`, Landlock fallback", statistics.median(landlock),
                        p99(landlock), "ms", base))  # fmt: skip
    print_rows(f"bash call in its sandbox ({CALLS} calls each, alternating)", rows)
    return rows


if __name__ == "__main__":
    main()
