"""The judge's answer is parsed strictly (agent_process/judge.py): only a JSON object with a
boolean `pass` and a string `reason` is a verdict."""

from __future__ import annotations

import pytest

from agent_process.judge import Judged, parse_verdict


def test_a_verdict_object_is_read() -> None:
    assert parse_verdict(' {"pass": true, "reason": "ok"}\n') == (True, "ok")
    assert parse_verdict('{"pass": false, "reason": "no", "score": 2}') == (False, "no")


@pytest.mark.parametrize(
    "text",
    [
        "Sure, it passes",
        '```json\n{"pass": true, "reason": "x"}\n```',
        '{"pass": "true", "reason": "x"}',
        '{"pass": 1, "reason": "x"}',
        '{"pass": true}',
        '[{"pass": true, "reason": "x"}]',
        "",
    ],
)
def test_anything_else_is_not_a_pass(text: str) -> None:
    with pytest.raises(Judged):
        parse_verdict(text)
