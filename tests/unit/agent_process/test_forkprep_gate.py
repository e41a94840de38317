"""Which preparation steps run: the measured ones for this Python, none with
GOONDAN_FORK_WARM=0, exactly the named ones with a list."""

from __future__ import annotations

import pytest

from agent_process.forkprep.gate import ENV, MEASURED, Step, steps


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", frozenset()),
        ("off", frozenset()),
        (" False ", frozenset()),
        ("share,heap", frozenset({Step.SHARE, Step.HEAP})),
        ("start, turn", frozenset({Step.START, Step.TURN})),
        ("heap,bogus", frozenset({Step.HEAP})),  # an unknown name never stops the fork server
    ],
)
def test_the_variable_turns_steps_off_or_names_them(value: str, expected: frozenset[Step]) -> None:
    assert steps({ENV: value}, (3, 11), "cpython") == expected


@pytest.mark.parametrize("value", [None, "1", "on", "yes"])
def test_by_default_the_steps_measured_on_this_version_run(value: str | None) -> None:
    env = {} if value is None else {ENV: value}
    for version in [(3, 11), (3, 12), (3, 13)]:
        expected = {s for s, v in MEASURED.items() if v is None or version in v}
        assert steps(env, version, "cpython") == expected


def test_a_version_nobody_measured_gets_only_what_does_not_depend_on_it() -> None:
    assert steps({}, (3, 99), "cpython") == {Step.SHARE, Step.MALLOC}
    assert steps({}, (3, 11), "pypy") == {Step.SHARE, Step.MALLOC}
    assert steps({ENV: "start"}, (3, 99), "cpython") == {Step.START}  # asked for: measured
