"""Agent.spec.limits: sizes, and bad values as coded diagnostics at their field."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundles.diagnostics import BundleError
from bundles.kinds import AgentLimits
from bundles.limits import Limits, parse_size, problems, resolved
from bundles.loader import load_bundle
from protocol.errors import ErrorCode
from tests.unit.bundles.conftest import VALID_TAIL, write_bundle


@pytest.mark.parametrize(
    ("text", "size"),
    [(1024, 1024), ("1000", 1000), ("512Mi", 512 << 20), ("1.5Gi", 3 << 29), ("2G", 2 * 10**9),
     ("64k", 64_000), (" 3Ki ", 3072), ("1Ti", 1 << 40)],
)  # fmt: skip
def test_sizes(text: int | str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "Mi", "12 MB", "1e9", "-5Mi", "five", "1.2.3G"])
def test_not_sizes(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_problems_name_each_bad_field() -> None:
    bad = AgentLimits(memory="1Mi", cpu_seconds=0, open_files=3, processes=-1, cpus=0.0)
    assert [field for field, _ in problems(bad)] == [
        "memory", "cpuSeconds", "openFiles", "processes", "cpus",
    ]  # fmt: skip
    good = AgentLimits(memory="512Mi", cpu_seconds=60, open_files=256, processes=64, cpus=0.5)
    assert problems(good) == []
    assert resolved(good) == Limits(
        memory=512 << 20, cpu_seconds=60, open_files=256, processes=64, cpus=0.5
    )
    assert not resolved(AgentLimits()) and resolved(good)


@pytest.mark.parametrize(
    ("limits", "field"),
    [("{memory: lots}", "memory"), ("{memory: 1000}", "memory"), ("{processes: 0}", "processes"),
     ("{openFiles: 4}", "openFiles"), ("{cpuSeconds: -1}", "cpuSeconds"), ("{cpus: 0}", "cpus")],
)  # fmt: skip
def test_validate_rejects_bad_limits_at_their_field(
    tmp_path: Path, limits: str, field: str
) -> None:
    text = VALID_TAIL.replace(
        "    modelRef: Model/fake\n", f"    modelRef: Model/fake\n  limits: {limits}\n"
    )
    write_bundle(tmp_path, text)
    with pytest.raises(BundleError) as info:
        load_bundle(tmp_path, packages=[])
    assert [(d.code, d.path) for d in info.value.diagnostics] == [
        (ErrorCode.E_CONFIG_SCHEMA_INVALID, f"goondan.yaml:16 spec.limits.{field}")
    ]


def test_a_limit_of_the_wrong_type_is_a_schema_error(tmp_path: Path) -> None:
    text = VALID_TAIL.replace(
        "    modelRef: Model/fake\n", "    modelRef: Model/fake\n  limits: {processes: many}\n"
    )
    write_bundle(tmp_path, text)
    with pytest.raises(BundleError) as info:
        load_bundle(tmp_path, packages=[])
    assert [d.code for d in info.value.diagnostics] == [ErrorCode.E_CONFIG_SCHEMA_INVALID]
