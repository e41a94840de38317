"""Credentials leave the agent's environment once it is built; ordinary variables stay."""

from __future__ import annotations

from agent_process.secretenv import drop_secret_variables


def test_variables_holding_a_secret_are_removed_and_named() -> None:
    environ = {
        "CHAT_BOT": "123:tok-abcdef",
        "AUTH_HEADER": "Bearer 123:tok-abcdef",
        "HOOK_PORT": "8794",
        "PATH": "/usr/bin",
        "SHORT": "abc",
    }
    removed = drop_secret_variables({"123:tok-abcdef", "abc"}, environ)
    assert removed == ["AUTH_HEADER", "CHAT_BOT"]
    # too short to be told apart from ordinary text (bundles.redact.MIN_SECRET_LEN)
    assert environ == {"HOOK_PORT": "8794", "PATH": "/usr/bin", "SHORT": "abc"}


def test_what_the_process_needs_to_run_stays() -> None:
    environ = {"PATH": "/opt/test1234/bin:/usr/bin", "LC_ALL": "C.test1234", "X": "test1234"}
    assert drop_secret_variables({"test1234"}, environ) == ["X"]
    assert set(environ) == {"PATH", "LC_ALL"}


def test_without_secrets_the_environment_is_not_read() -> None:
    class Untouchable(dict[str, str]):
        def items(self):  # type: ignore[override]
            raise AssertionError("read")

    assert drop_secret_variables(set(), Untouchable(X="ab")) == []
    assert drop_secret_variables({"ab"}, Untouchable(X="ab")) == []  # too short to count
