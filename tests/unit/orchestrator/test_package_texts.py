"""`goondan package new`'s names: distribution, module and resource names from a package name."""

from __future__ import annotations

import pytest

from bundles.naming import name_problem
from orchestrator.templates.package_texts import names


@pytest.mark.parametrize(
    ("package", "expected"),
    [
        ("@acme/triage", ("acme-triage", "acme_triage", "triage")),
        ("tools", ("tools", "tools", "tools")),
        ("@acme/My.Tool__x", ("acme-my.tool__x", "acme_my_tool_x", "My-Tool_x")),
    ],
)
def test_names(package: str, expected: tuple[str, str, str]) -> None:
    assert names(package) == expected
    _, module, short = names(package)
    assert module.isidentifier()
    assert name_problem(short) is None
    assert name_problem(f"{short}-ticker") is None
