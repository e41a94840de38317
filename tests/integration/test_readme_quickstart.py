"""The quickstart of README.md and of docs/getting-started.md, run as a newcomer runs it.

Every fenced `sh` block of the `## Quickstart` section goes through a real bash, in order, in
one shell state (the working directory and the exported variables carry from block to block,
as in one terminal), with the venv activated as the README's "Two commands" says. The blocks
run in a fresh directory laid out like a checkout (`.venv` links to this test's venv) with
`HOME` there, so `~/.goondan` is the state root the README shows. An HTML comment right before
a block says how the test takes it:

- `<!-- quickstart: background until "TEXT" -->`: a command that keeps running (the daemon,
  Studio): started in the background, ready when its output shows TEXT;
- `<!-- quickstart: skip (why) -->`: not run (the real-model step needs an API key);
- `<!-- quickstart: model -->` on a `yaml` block: the Model document the reader swaps in; it
  must validate in the bundle `init` wrote.

A `text` block right after an `sh` block is that block's output: each of its lines must be in
what the block printed. The one change made to a block: Studio listens on a free port (two
runs of this test, or the reader's own Studio, must not collide on 8791).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.integration.harness import REPO, child_env

QUICKSTARTS = (REPO / "README.md", REPO / "docs" / "getting-started.md")
ACTIVATE = "source .venv/bin/activate"
"""How the README puts `goondan` on PATH; the session starts with it."""
REWRITES = {"goondan studio": "goondan studio --listen 127.0.0.1:0"}
STEP_SECONDS = 60
READY_SECONDS = 30
STOP_SECONDS = 30
MARKER = re.compile(r"<!--\s*quickstart:\s*(?P<kind>\w+)(?:[^\"]*\"(?P<until>[^\"]*)\")?.*-->")
FENCE = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```\n", re.S | re.M)


@dataclass
class Block:
    lang: str
    body: str
    how: str = "run"
    """run, background, skip or model."""
    until: str = ""
    expected: list[str] = field(default_factory=list)
    """Lines the block must print (the `text` block after it)."""


def quickstart(path: Path) -> list[Block]:
    """The fenced blocks of the `## Quickstart` section of `path`, with their markers."""
    text = path.read_text()
    start = text.index("\n## Quickstart\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end > 0 else len(text)]
    blocks: list[Block] = []
    for fence in FENCE.finditer(section):
        before = section[: fence.start()].rstrip().rsplit("\n", 1)[-1]
        marker = MARKER.search(before)
        if fence["lang"] == "text" and blocks and blocks[-1].lang == "sh":
            blocks[-1].expected += [line for line in fence["body"].splitlines() if line.strip()]
            continue
        block = Block(fence["lang"], fence["body"])
        if marker is not None:
            block.how, block.until = marker["kind"], marker["until"] or ""
        blocks.append(block)
    return blocks


def rewritten(body: str) -> str:
    for old, new in REWRITES.items():
        body = re.sub(rf"^{re.escape(old)}\b", new, body, flags=re.M)
    return body


class Session:
    """One terminal's state across bash processes: the directory and the exported variables
    are saved after each block and restored before the next."""

    def __init__(self, root: Path, venv: Path) -> None:
        self.root = root
        self.state = root / ".session"
        self.state.mkdir()
        (root / ".venv").symlink_to(venv)
        (root / "home").mkdir()
        (self.state / "cwd").write_text(str(root))
        (self.state / "env").write_text("")
        env = child_env({"HOME": str(root / "home"), "PYTHONDONTWRITEBYTECODE": "1"})
        for name in ("GOONDAN_STATE_ROOT", "VIRTUAL_ENV", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
            env.pop(name, None)
        self.env = env
        self.background: list[asyncio.subprocess.Process] = []

    def script(self, body: str, *, save: bool) -> str:
        restore = f'cd "$(cat {self.state}/cwd)"\nsource {self.state}/env\n'
        after = f"\npwd > {self.state}/cwd\nexport -p > {self.state}/env\n" if save else "\n"
        return "set -euo pipefail\n" + restore + body + after

    async def run(self, body: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", self.script(body, save=True), env=self.env, start_new_session=True,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            async with asyncio.timeout(STEP_SECONDS):
                out, err = await proc.communicate()
        except TimeoutError:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            raise AssertionError(f"no end within {STEP_SECONDS} s:\n{body}") from None
        assert proc.returncode == 0, f"exit {proc.returncode}:\n{body}\n{err.decode()}"
        return out.decode()

    async def start(self, body: str, until: str) -> asyncio.subprocess.Process:
        log = self.state / f"bg{len(self.background)}.log"
        with log.open("wb") as sink:
            proc = await asyncio.create_subprocess_exec(
                "bash", "-c", self.script(body, save=False), env=self.env,
                stdout=sink, stderr=asyncio.subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        self.background.append(proc)
        try:
            async with asyncio.timeout(READY_SECONDS):
                while until not in log.read_text():
                    assert proc.returncode is None, f"{body!r} ended: {log.read_text()}"
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise AssertionError(f"{body!r} never printed {until!r}: {log.read_text()}") from None
        return proc

    def kill_all(self) -> None:
        for proc in self.background:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)


def venv_or_skip() -> Path:
    venv = Path(sys.prefix)
    if (venv / "bin" / "activate").exists() and (venv / "bin" / "goondan").exists():
        return venv
    why = f"{venv} is no venv with goondan installed (make install makes one)"
    if os.environ.get("CI") == "true":
        pytest.fail(why)
    pytest.skip(why)


@contextlib.contextmanager
def short_dir() -> Iterator[Path]:
    # the daemon's socket paths under ~/.goondan must stay under 107 bytes
    root = Path(tempfile.mkdtemp(prefix="gq", dir="/tmp"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
async def session() -> AsyncIterator[Session]:
    venv = venv_or_skip()
    with short_dir() as root:
        terminal = Session(root, venv)
        try:
            yield terminal
        finally:
            terminal.kill_all()
            async with asyncio.timeout(10):
                for proc in terminal.background:
                    await proc.wait()


async def swap_in_model(session: Session, model: str) -> None:
    """The reader's edit: the scripted Model document of the bundle replaced by `model`; the
    edited bundle (a copy) must validate with the key it names set."""
    cwd = Path((session.state / "cwd").read_text().strip())
    copy = cwd.parent / f"{cwd.name}-real"
    shutil.copytree(cwd, copy)
    docs = (copy / "goondan.yaml").read_text().split("\n---\n")
    scripted = [i for i, doc in enumerate(docs) if "\nkind: Model\n" in f"\n{doc}"]
    assert len(scripted) == 1, "the bundle init wrote has one Model document"
    docs[scripted[0]] = model.rstrip("\n")
    (copy / "goondan.yaml").write_text("\n---\n".join(docs))
    key = re.search(r"env: (\w+)", model)
    assert key is not None, model
    out = await session.run(f"{key[1]}=sk-not-a-key goondan validate --strict {copy}")
    assert "valid" in out, out


def distinct() -> dict[str, Path]:
    """One page per distinct quickstart, named by every page that has the same blocks: the
    README's and the getting-started page's are one text today, run once (a run is ~5 CPU-s);
    an edit to either gives it a run of its own."""
    shared: dict[str, list[Path]] = {}
    for page in QUICKSTARTS:
        shared.setdefault(repr(quickstart(page)), []).append(page)
    return {"+".join(p.name for p in pages): pages[0] for pages in shared.values()}


@pytest.mark.parametrize("page", list(distinct().values()), ids=list(distinct()))
async def test_the_quickstart_runs_as_written(page: Path, session: Session) -> None:
    assert ACTIVATE in (REPO / "README.md").read_text()
    blocks = quickstart(page)
    assert [b.how for b in blocks].count("skip") == 1, "only the real-model step is skipped"
    await session.run(ACTIVATE)
    daemon: asyncio.subprocess.Process | None = None
    for block in blocks:
        if block.how == "model":
            await swap_in_model(session, block.body)
        elif block.how == "background":
            proc = await session.start(rewritten(block.body), block.until)
            daemon = daemon or proc
        elif block.how == "run":
            assert block.lang == "sh", block.body
            out = await session.run(rewritten(block.body))
            missing = [line for line in block.expected if line not in out]
            assert not missing, f"{block.body} printed:\n{out}"
        else:
            assert block.how == "skip", block.how
    # the last block stopped the daemon: it ends by itself, and cleanly
    assert daemon is not None, "the quickstart starts a daemon"
    async with asyncio.timeout(STOP_SECONDS):
        assert await daemon.wait() == 0
    studio = [p for p in session.background if p is not daemon]
    for proc in studio:  # Studio is the reader's to stop (Ctrl-C)
        assert proc.returncode is None, "Studio ended by itself"
        os.killpg(proc.pid, signal.SIGINT)
        async with asyncio.timeout(STOP_SECONDS):
            await proc.wait()
