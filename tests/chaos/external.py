"""External events through the paths users take: the `goondan send` CLI and the webhook.

- CLI: `goondan send --agent worker --instance K "cli N"` as a real subprocess, alternately
  waiting for the reply (exit 0 with the worker's answer, or exit 1 with a coded error on
  stderr) and with `--no-wait` (exit 0 printing the accepted event id, which must later show
  up in the worker's conversation or be reported failed by the daemon).
- webhook: `POST /events` to the chaos bundle's Connection `hook`: event `message` waits for
  the worker's reply (200 with the reply, or 502/504 with a coded error), event `note` is
  accepted at once (202 with the event id, found later like a `--no-wait` send).

Every call is bounded: a CLI still running after its limit is killed and counted as a hang;
an HTTP request without a response by the client's timeout is a hang.
"""

from __future__ import annotations

import asyncio
import random
import re
import sys
from pathlib import Path

import httpx

from tests.chaos.load import GRACE, Tally
from tests.integration.harness import child_env

GOONDAN = Path(sys.executable).with_name("goondan")
"""The console script of the venv that runs the tests: what an operator types."""
CLI_TIMEOUT_S = 15
CLI_LIMIT_S = CLI_TIMEOUT_S + 5 + GRACE
"""`goondan send --timeout 15` gives up after 15 + 5 s by itself; later than that is a hang."""
HOOK_TIMEOUT_S = 15 + GRACE
"""The Connection's `timeoutMs` is 15 s (then 504): no response past this is a hang."""
CODED = re.compile(r"^goondan \w+: (E_[A-Z0-9_]+) ", re.MULTILINE)


async def goondan(*args: str, limit: float) -> tuple[int, str, str] | None:
    """`goondan ARGS` (exit code, stdout, stderr), or None when it ran past `limit`."""
    proc = await asyncio.create_subprocess_exec(
        str(GOONDAN), *args, env=child_env(), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        async with asyncio.timeout(limit):
            out, err = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return None
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def cli_sender(swarm: str, tally: Tally, keys: list[str], stop: asyncio.Event) -> None:
    while not stop.is_set():
        tally.sent += 1
        n, key = tally.sent, random.choice(keys)
        text, wait = f"cli {n}", n % 2 == 0
        args = ["send", "--swarm", swarm, "--agent", "worker", "--instance", key,
                "--timeout", str(CLI_TIMEOUT_S)]  # fmt: skip
        done = await goondan(*args, *([] if wait else ["--no-wait"]), text, limit=CLI_LIMIT_S)
        if done is None:
            tally.hangs.append(f"`goondan send {text}` still running after {CLI_LIMIT_S} s")
            continue
        code, out, err = done
        coded = CODED.search(err)
        if code == 0 and wait and f"worker: {text}" in out:
            tally.answered["reply"] += 1
        elif code == 0 and not wait and out.strip():
            tally.queued[out.strip()] = (key, text)
        elif code != 0 and coded is not None:
            tally.answered[coded.group(1)] += 1
        else:
            tally.faults.append(f"`goondan send {text}` exit {code}: {out[-200:]} {err[-300:]}")


async def hook_sender(url: str, tally: Tally, keys: list[str], stop: asyncio.Event) -> None:
    async with httpx.AsyncClient(timeout=HOOK_TIMEOUT_S) as client:
        while not stop.is_set():
            tally.sent += 1
            n, key = tally.sent, random.choice(keys)
            event = "note" if n % 2 else "message"
            text = f"{'note' if n % 2 else 'hook'} {n}"
            body = {"event": event, "text": text, "properties": {"key": key}}
            try:
                response = await client.post(f"{url}/events", json=body)
            except httpx.TimeoutException:
                tally.hangs.append(f"webhook {text}: no response within {HOOK_TIMEOUT_S} s")
                continue
            except httpx.HTTPError as exc:  # the connector is never killed: nothing excuses it
                tally.faults.append(f"webhook {text}: {exc!r}")
                continue
            judge_hook(tally, key, text, response)


def judge_hook(tally: Tally, key: str, text: str, response: httpx.Response) -> None:
    try:
        data = response.json()
    except ValueError:
        data = {}
    status = response.status_code
    code = (data.get("error") or {}).get("code") if isinstance(data, dict) else None
    if status == 202 and data.get("eventId"):
        tally.queued[str(data["eventId"])] = (key, text)
    elif status == 200 and data.get("reply") == f"worker: {text}":
        tally.answered["reply"] += 1
    elif status >= 400 and code:
        tally.answered[str(code)] += 1
    else:
        tally.faults.append(f"webhook {text}: {status} {response.text[:300]}")
