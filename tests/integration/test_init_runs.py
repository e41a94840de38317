"""`goondan init` output run offline through the real daemon: `goondan run DIR --input TEXT`
starts the orchestrator and real agent processes with the scripted model, prints the reply
and exits 0 after a graceful shutdown."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

GOONDAN = [sys.executable, "-m", "orchestrator"]


async def _goondan(*argv: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *GOONDAN,
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await proc.communicate()
    except asyncio.CancelledError:  # the test's timeout: leave no daemon behind
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def _init(directory: Path, template: str) -> None:
    code, _, err = await _goondan("init", str(directory), "--template", template)
    assert code == 0, err


async def test_default_template_answers_and_uses_its_file_tool(tmp_path: Path) -> None:
    bundle = tmp_path / "demo"
    async with asyncio.timeout(120):
        await _init(bundle, "default")
        code, out, err = await _goondan("run", str(bundle), "--input", "hello there")
        assert code == 0, err
        assert out.strip() == (
            "Hello! I run offline. Try 'note <text>' or 'list files'. You said: hello there"
        )
        code, out, err = await _goondan("run", str(bundle), "--input", "note buy milk")
        assert code == 0, err
        assert out.strip() == "Saved your note to notes.txt in my workspace."
    state_root = Path(os.environ["GOONDAN_STATE_ROOT"])  # set per test by tests/conftest.py
    notes = list((state_root / "instances").rglob("notes.txt"))
    assert [n.read_text() for n in notes] == ["note buy milk\n"]


async def test_minimal_template_answers(tmp_path: Path) -> None:
    async with asyncio.timeout(60):
        await _init(tmp_path / "tiny", "minimal")
        code, out, err = await _goondan("run", str(tmp_path / "tiny"), "--input", "hi")
    assert code == 0, err
    assert out.strip() == "You said: hi"


async def test_multi_agent_template_delegates_to_the_worker(tmp_path: Path) -> None:
    bundle = tmp_path / "team"
    async with asyncio.timeout(60):
        await _init(bundle, "multi-agent")
        main_file = bundle / "goondan.yaml"
        # Short deadlines, so that a lost response fails in seconds rather than minutes.
        main_file.write_text(
            main_file.read_text().replace(
                "    maxStepsPerTurn: 8\n",
                "    maxStepsPerTurn: 8\n"
                "    lifecycle: {requestTimeoutMs: 20000}\n"
                "    shutdown: {gracePeriodSeconds: 1}\n",
            )
        )
        code, out, err = await _goondan("run", str(bundle), "--input", "count to 3")
    assert code == 0, err
    prefix = "The worker answered: "
    assert out.startswith(prefix), out
    result = json.loads(out.strip().removeprefix(prefix))
    assert result["status"] == "ok", result
    assert (result["output"]["target"], result["output"]["response"]) == (
        "worker",
        "done: count to 3",
    )
    assert not (bundle / "tools").exists()  # the built-in agents tool: no code of its own
