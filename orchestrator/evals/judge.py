"""The `judge` evaluator's client: one `python -m agent_process.judge` worker per eval run.

The orchestrator never imports agent_process (ARCHITECTURE.md §2), so the judge's model call is
made by that worker (the agents' own provider code, the bundle loaded as an agent loads it),
started at the first judged case and spoken to in JSON lines, several judgments at once.
Every failure (an unknown Model, a model error, an answer that is not `{"pass", "reason"}`, a
worker that died or is too slow) is an E_EVAL_JUDGE failure of the case, never a pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from protocol.errors import ErrorCode

log = structlog.get_logger("goondan.evals.judge")

JUDGE_TIMEOUT_S = 120.0
LINE_LIMIT = 1 << 20
"""Bytes of one answer line (the worker cuts a reason to 2000 characters)."""
MAX_TEXT = 200_000
"""Characters of the input and of the reply sent to the judge (the worker's own cut)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    passed: bool
    reason: str
    tokens: int | None = None
    usage: dict[str, int] | None = None
    """The judge's model call's tokens, priced into the case's cost (evals/cost.py)."""


class JudgeFailed(Exception):
    def __init__(self, message: str, usage: dict[str, int] | None = None) -> None:
        super().__init__(f"{ErrorCode.E_EVAL_JUDGE}: {message}")
        self.usage = usage
        """Tokens the failed judgment spent (its model answered, not with a verdict)."""


class JudgeClient:
    def __init__(self, bundle: Path, state_root: Path, env_files: Sequence[Path] = ()) -> None:
        self.argv = [sys.executable, "-m", "agent_process.judge", str(bundle),
                     "--state-root", str(state_root)]  # fmt: skip
        self.argv += [a for f in env_files for a in ("--env-file", str(f))]
        self.proc: asyncio.subprocess.Process | None = None
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.ids = itertools.count(1)
        self.lock = asyncio.Lock()
        self.reader: asyncio.Task[None] | None = None

    async def _started(self) -> asyncio.subprocess.Process:
        async with self.lock:
            if self.proc is None:
                self.proc = await asyncio.create_subprocess_exec(
                    *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE, limit=LINE_LIMIT,
                )  # fmt: skip
                self.reader = asyncio.create_task(self._read(self.proc))
            return self.proc

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        try:
            while line := await proc.stdout.readline():
                with contextlib.suppress(ValueError, TypeError, AttributeError):
                    answer = json.loads(line)
                    future = self.waiting.pop(int(answer.get("id", -1)), None)
                    if future is not None and not future.done():
                        future.set_result(answer)
        except ValueError:  # a line over the limit: the worker is not speaking the protocol
            proc.kill()
        why = await self._stderr(proc)
        for future in self.waiting.values():  # the worker is gone: nothing more will answer
            if not future.done():
                future.set_exception(JudgeFailed(f"the judge worker exited: {why}"))
        self.waiting.clear()

    @staticmethod
    async def _stderr(proc: asyncio.subprocess.Process) -> str:
        assert proc.stderr is not None
        text = (await proc.stderr.read()).decode(errors="replace").strip()
        return text.splitlines()[-1] if text else f"exit code {await proc.wait()}"

    async def judge(self, model: str, rubric: str, said: str, reply: str) -> Verdict:
        proc = await self._started()
        assert proc.stdin is not None
        ask_id = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[ask_id] = future
        ask = {"id": ask_id, "model": model, "rubric": rubric, "input": said[:MAX_TEXT],
               "reply": reply[:MAX_TEXT]}  # fmt: skip
        try:
            proc.stdin.write(json.dumps(ask).encode() + b"\n")
            await proc.stdin.drain()
            async with asyncio.timeout(JUDGE_TIMEOUT_S):
                answer = await future
        except (BrokenPipeError, ConnectionResetError):
            raise JudgeFailed("the judge worker is gone") from None
        except TimeoutError:
            raise JudgeFailed(f"no verdict within {JUDGE_TIMEOUT_S:g} s") from None
        finally:
            self.waiting.pop(ask_id, None)
        return _verdict(answer)

    async def aclose(self) -> None:
        if self.proc is None:
            return
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            async with asyncio.timeout(10):
                await self.proc.wait()
        except TimeoutError:
            log.warning("judge_worker_killed", pid=self.proc.pid)
            self.proc.kill()
            await self.proc.wait()
        if self.reader is not None:
            await self.reader


def _usage(answer: dict[str, Any]) -> dict[str, int] | None:
    """The answer's token counts; a count that is not a non-negative int is left out."""
    usage = answer.get("usage")
    if not isinstance(usage, dict):
        return None
    return {str(k): v for k, v in usage.items()
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0}  # fmt: skip


def _verdict(answer: dict[str, Any]) -> Verdict:
    error, usage = answer.get("error"), _usage(answer)
    if isinstance(error, dict):
        raise JudgeFailed(str(error.get("message", "the judge failed")), usage)
    tokens = None
    if usage is not None:
        tokens = sum(v for k, v in usage.items() if k != "cachedInputTokens")
    return Verdict(passed=bool(answer.get("pass")), reason=str(answer.get("reason", "")),
                   tokens=tokens, usage=usage)  # fmt: skip
