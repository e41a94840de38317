"""Code compiled by `warm` is reused by the loader; an edited file is compiled afresh."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from bundles import codecache


def load(path: Path, name: str) -> object:
    spec = codecache.spec_for(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_warmed_code_is_reused_and_edits_are_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # with bytecode written (PYTHONDONTWRITEBYTECODE unset), a .pyc of the first load would be
    # trusted for the edit below: same size, same second
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr(codecache, "_code", {})
    tool = tmp_path / "tool.py"
    tool.write_text("VALUE = 1\n")
    codecache.warm([tool, tmp_path / "missing.py"])
    assert list(codecache._code) == [(str(tool), b"VALUE = 1\n")]
    compiled: list[str] = []
    real = compile

    def counting(*args: object, **kwargs: object) -> object:
        compiled.append(str(args[1]))
        return real(*args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(codecache, "compile", counting, raising=False)
    assert load(tool, "cc_tool_a").VALUE == 1  # type: ignore[attr-defined]
    assert compiled == []  # the fork server's code, not compiled again
    tool.write_text("VALUE = 2\n")
    assert load(tool, "cc_tool_b").VALUE == 2  # type: ignore[attr-defined]
    assert compiled == [str(tool)]
    assert not (tmp_path / "__pycache__").exists()


def test_a_file_that_does_not_compile_is_left_to_the_loader(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def (:\n")
    codecache.warm([bad])  # skipped quietly
    with pytest.raises(SyntaxError):
        load(bad, "cc_bad")
