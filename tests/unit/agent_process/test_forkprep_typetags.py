"""The fork server's type-tag step: every class gets one failed lookup, through
`type.__getattribute__` (no metaclass hook of a bundle's code runs)."""

from __future__ import annotations

import contextlib
from typing import Any

from agent_process.forkprep import typetags


def test_every_class_is_looked_up_and_no_metaclass_hook_runs() -> None:
    calls: list[str] = []

    class Hooked(type):
        def __getattr__(cls, name: str) -> Any:
            calls.append(name)
            raise RuntimeError("a metaclass hook ran")

    class Watched(metaclass=Hooked):
        pass

    found = typetags.assign_all()
    assert found > 100  # this process's classes, Watched among them
    assert calls == []
    # the lookup it makes is one that misses: the same lookup through the hook would run it
    with contextlib.suppress(RuntimeError):
        getattr(Watched, typetags.ABSENT)
    assert calls == [typetags.ABSENT]
