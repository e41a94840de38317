"""Run `goondan studio` as a real process, and the browser that looks at it.

The browser is Debian's `chromium` driven by Playwright's Python package (`executable_path`;
Playwright's own browser downloads are never used). Without them the browser tests skip with
the command that installs them, except under CI=true, where a missing browser fails the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.harness import PYTHON, REPO, child_env

SCREENSHOTS = REPO / "tests" / "artifacts" / "studio"
INSTALL = "apt-get install -y chromium (make install does it as root)"


@dataclass
class Studio:
    proc: asyncio.subprocess.Process
    url: str
    """The URL it printed (with ?token= when it has one)."""

    @property
    def base(self) -> str:
        return self.url.split("?", 1)[0].rstrip("/")

    @property
    def token(self) -> str:
        return self.url.split("?token=", 1)[1]

    @property
    def headers(self) -> dict[str, str]:
        """What a client that holds the token sends (the page sends its cookie instead)."""
        return {"Authorization": f"Bearer {self.token}"}

    def client(self, **kwargs: Any) -> httpx.AsyncClient:
        """An httpx client of this Studio that holds its token."""
        return httpx.AsyncClient(base_url=self.base, headers=self.headers, **kwargs)


@contextlib.asynccontextmanager
async def studio(*args: str, env: dict[str, str] | None = None) -> AsyncIterator[Studio]:
    proc = await asyncio.create_subprocess_exec(
        PYTHON, "-m", "orchestrator", "studio", "--listen", "127.0.0.1:0", *args,
        env=child_env(env), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(30):
            line = (await proc.stdout.readline()).decode()
        assert line.startswith("goondan studio: http://"), line
        yield Studio(proc, line.split()[2])
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
            try:
                async with asyncio.timeout(10):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def first_event(response: httpx.Response, name: str) -> Any:
    """The data of the stream's first server-sent event called `name`."""
    event = None
    async for line in response.aiter_lines():
        if line.startswith("event:"):
            event = line.partition(":")[2].strip()
        elif line.startswith("data:") and event == name:
            return json.loads(line.partition(":")[2])
    raise AssertionError(f"the stream ended without a {name!r} event")


def chromium_path() -> str:
    """Debian's chromium, or skip (fail under CI=true) saying how to install it."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    problem = None
    if path is None:
        problem = f"no chromium on PATH: {INSTALL}"
    else:
        try:
            import playwright  # noqa: F401
        except ImportError:
            problem = "Playwright's Python package is missing: make install"
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(problem)
        pytest.skip(problem)
    assert path is not None
    return path


@contextlib.asynccontextmanager
async def browser_page() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    executable = chromium_path()
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=executable)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(20_000)
            yield page
        finally:
            await browser.close()


async def screenshot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    await page.screenshot(path=str(path), full_page=False)
    return path
