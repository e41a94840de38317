"""`python -m agent_process.judge BUNDLE`: the LLM judge of `goondan eval` (docs/guides/evals.md).

A case's `judge: {rubric, model: Model/NAME}` asks a Model of the bundle whether the reply meets
the rubric. The orchestrator never imports agent_process (ARCHITECTURE.md §2), so `goondan eval`
runs this worker beside the daemon, as `validate --deep` runs `agent_process.check`: it loads
the bundle as an agent process does, builds each judge Model with the agent's own provider code
(`create_model`) and answers JSON lines on stdin with JSON lines on stdout, several at once:

    in:  {"id": 1, "model": "Model/judge", "rubric": "...", "input": "...", "reply": "..."}
    out: {"id": 1, "pass": true, "reason": "...", "usage": {...}}
         {"id": 1, "error": {"code": "E_EVAL_JUDGE", "message": "..."}, "usage": {...}}

`usage` is the judge's model call's tokens (`inputTokens`, `outputTokens`, `cachedInputTokens`),
priced into the case's cost by `goondan eval`; an error has it when the call was made (its
answer was not a verdict: the tokens were spent all the same).

The answer is parsed strictly: a JSON object with a boolean `pass` and a string `reason`;
anything else is E_EVAL_JUDGE, never a pass.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent_process import resolve
from agent_process.models import (
    Model,
    ModelError,
    ModelRequest,
    ModelResponse,
    create_model,
    recording,
)
from bundles.diagnostics import BundleError
from bundles.kinds import Kind
from bundles.loader import load_bundle
from bundles.model import Bundle
from protocol.conversation import Role, new_message
from protocol.endpoints import default_state_root
from protocol.errors import ErrorCode

SYSTEM = (
    "You are a strict evaluator of an AI agent's reply. You get a rubric, the user's input and "
    "the agent's reply. Decide whether the reply meets the rubric. Answer with one JSON object "
    'and nothing else: {"pass": true or false, "reason": "one or two sentences saying why"}.'
)
MAX_TEXT = 200_000
"""Characters of the input and of the reply given to the judge (a runaway reply is cut)."""
MAX_REASON = 2000
"""Characters of the judge's reason kept (it lands in a report's table and files)."""
LINE_LIMIT = 16 * 1024 * 1024
"""Bytes of one request line (two texts of MAX_TEXT, JSON-escaped)."""


class Judged(Exception):
    """Why a judgment failed, as an E_EVAL_JUDGE message."""


def parse_verdict(text: str) -> tuple[bool, str]:
    """`(passed, reason)` from the judge's answer; Judged when it is not exactly that shape."""
    try:
        value = json.loads(text.strip())
    except ValueError:
        raise Judged(f"the judge's answer is not JSON: {text[:200]!r}") from None
    if (
        not isinstance(value, dict)
        or not isinstance(value.get("pass"), bool)
        or not isinstance(value.get("reason"), str)
    ):
        raise Judged(f'the judge\'s answer is not {{"pass": bool, "reason": str}}: {text[:200]!r}')
    return bool(value["pass"]), str(value["reason"])[:MAX_REASON]


def _prompt(rubric: str, said: str, reply: str) -> str:
    return (
        f"Rubric:\n{rubric}\n\nThe user's input:\n{said[:MAX_TEXT]}\n\n"
        f"The agent's reply:\n{reply[:MAX_TEXT]}\n\nAnswer with the JSON object only."
    )


class Judge:
    """The bundle's judge Models, each built once and shared by concurrent judgments."""

    def __init__(self, bundle: Bundle, state_root: Path) -> None:
        self.bundle, self.state_root = bundle, state_root
        self.models: dict[str, tuple[Model, bool]] = {}
        """name -> (the model, whether its provider has a JSON mode)"""

    def _model(self, ref: str) -> tuple[Model, bool]:
        name = ref.removeprefix("Model/")
        if name not in self.models:
            res = self.bundle.find(Kind.MODEL, name)
            if res is None:
                raise Judged(f"Model/{name} is not in the bundle; name one of its Models")
            try:  # a replayed judge never calls its provider: CI replays without the key
                replayed = recording.replays(res)
                key = None if replayed else resolve.api_key(self.bundle, res, self.state_root)
            except resolve.ConfigProblem as exc:
                raise Judged(f"Model/{name}: {exc.info.code}: {exc.info.message}") from None
            # JSON mode where the provider has one (openai); the others are held to the prompt
            self.models[name] = create_model(res, api_key=key), res.spec.provider == "openai"
        return self.models[name]

    async def one(self, ask: dict[str, Any]) -> dict[str, Any]:
        response: ModelResponse | None = None
        try:
            model, json_mode = self._model(str(ask.get("model", "")))
            said, reply = str(ask.get("input", "")), str(ask.get("reply", ""))
            prompt = _prompt(str(ask.get("rubric", "")), said, reply)
            params = {"response_format": {"type": "json_object"}} if json_mode else {}
            request = ModelRequest(system=SYSTEM, messages=[new_message(Role.USER, prompt)],
                                   tools=[], params=params)  # fmt: skip
            response = await model.complete(request)
            passed, reason = parse_verdict(response.text)
        except ModelError as exc:
            return _error(f"the judge's model failed: {exc.info.code}: {exc.info.message}")
        except Judged as exc:
            return _error(str(exc), response)
        except Exception as exc:  # a provider's own failure: still an answer, never a hang
            return _error(f"the judge failed: {type(exc).__name__}: {exc}"[:1000])
        return {"pass": passed, "reason": reason, "usage": response.usage.as_dict()}

    async def aclose(self) -> None:
        for model, _ in self.models.values():
            await model.aclose()


def _error(message: str, response: ModelResponse | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"error": {"code": ErrorCode.E_EVAL_JUDGE.value, "message": message}}
    if response is not None:
        out["usage"] = response.usage.as_dict()
    return out


async def serve(judge: Judge) -> None:
    """Answer each line as its judgment ends (several run at once); stops at EOF on stdin."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    tasks: set[asyncio.Task[None]] = set()

    async def answer(ask: dict[str, Any]) -> None:
        out = await judge.one(ask)
        sys.stdout.write(json.dumps({"id": ask.get("id"), **out}) + "\n")
        sys.stdout.flush()

    while line := await reader.readline():
        try:
            ask = json.loads(line)
        except ValueError:
            continue
        if isinstance(ask, dict):
            task = asyncio.create_task(answer(ask))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)
    await judge.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent_process.judge")
    parser.add_argument("bundle")
    parser.add_argument("--env-file", action="append", default=[])
    parser.add_argument("--state-root")
    args = parser.parse_args(argv)
    state_root = Path(args.state_root) if args.state_root else default_state_root()
    try:
        bundle = load_bundle(args.bundle, env_files=[Path(f) for f in args.env_file],
                             state_root=state_root)  # fmt: skip
    except BundleError as exc:
        sys.stderr.write(f"the judge cannot load the bundle: {exc}\n")
        return 2
    asyncio.run(serve(Judge(bundle, state_root)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
