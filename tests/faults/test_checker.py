"""The fault suite's checker on made-up outcomes and conversations (no root needed): what it
counts as lost, duplicated, out of order and re-asked."""

from __future__ import annotations

from tests.faults.checker import check, longest_gap, unavailability
from tests.faults.workload import Outcome, answered, crossing


def sent(key: str, *texts: str, ok: bool = True) -> list[Outcome]:
    return [Outcome(key, text, 0.0, 1.0, ok) for text in texts]


def test_a_clean_run_passes_and_counts_requests() -> None:
    outcomes = sent("k0", "w0 k0", "req w1 k0", "w2 k0") + sent("k0", "w3 k0", ok=False)
    report = check(outcomes, {"k0": ["w0 k0", "req w1 k0", "w2 k0"]}, {"k0": ["req w1 k0"]})
    assert report.ok, report.table()
    assert (report.acknowledged, report.requests, report.failed) == (3, 1, 1)


def test_lost_duplicated_and_out_of_order_sends_fail_it() -> None:
    outcomes = sent("k0", "w0 k0", "w1 k0", "w2 k0")
    report = check(outcomes, {"k0": ["w1 k0", "w0 k0", "w1 k0"]}, {})
    assert report.lost == ["caller:k0 w2 k0"]
    assert report.duplicated == ["caller:k0 w1 k0"]
    assert report.out_of_order == ["caller:k0"]
    assert not report.ok


def test_a_request_lost_or_out_of_order_at_the_worker_fails_it() -> None:
    outcomes = sent("k0", "req w0 k0", "req w1 k0", "req w2 k0")
    callers = {"k0": ["req w0 k0", "req w1 k0", "req w2 k0"]}
    report = check(outcomes, callers, {"k0": ["req w1 k0", "req w0 k0"]})
    assert report.lost == ["worker:k0 req w2 k0"]
    assert report.out_of_order == ["worker:k0"]
    assert not report.ok


def test_a_request_asked_again_by_a_resumed_turn_is_counted_apart() -> None:
    outcomes = sent("k0", "req w0 k0", "req w1 k0")
    callers = {"k0": ["req w0 k0", "req w1 k0"]}
    report = check(outcomes, callers, {"k0": ["req w0 k0", "req w0 k0", "req w1 k0"]})
    assert report.reasked == ["worker:k0 req w0 k0"]
    assert report.ok, report.table()


def test_answers_and_crossing_keys() -> None:
    assert answered("w1 k0", "caller: w1 k0")
    assert not answered("w1 k0", "caller: w2 k0")
    assert answered("req w1 k0", '{"response":"worker: req w1 k0"}')
    assert not answered("req w1 k0", '{"error":"E_AGENT_TIMEOUT"}')
    keys = [f"k{i}" for i in range(6)]
    assert set(crossing(keys, ["n1", "n2", "n3"])) < set(keys)
    assert crossing(keys, ["n1"]) == []


def test_the_longest_gap_counts_an_outage_after_the_first_answer() -> None:
    def at(key: str, *done: float, ok: bool = True) -> list[Outcome]:
        return [Outcome(key, "w k", d - 0.1, d, ok) for d in done]

    # healed at 10: k0 answers at 11, then nothing from 12 to 19 (a second lapse); k1 is steady
    outcomes = at("k0", 9.0, 11.0, 12.0, 19.0, 20.0) + at("k0", 15.0, ok=False)
    outcomes += at("k1", *(10.5 + i for i in range(10)))
    assert unavailability(outcomes, 10.0, ["k0", "k1"]) == 1.0  # both answered within 1 s
    assert longest_gap(outcomes, 10.0, 20.0, ["k0", "k1"]) == 7.0  # k0's 12 -> 19
    assert longest_gap(outcomes, 10.0, 25.0, ["k1"]) == 25.0 - 19.5  # silent to the end
