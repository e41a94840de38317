"""Shared test settings: every test runs with its own state root so nothing touches ~/.goondan,
the long drives carry the `drive` marker, and the other daemons' fork servers skip their
preparation steps."""

from __future__ import annotations

import os
import signal
import sys
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests import sandboxing

DRIVES = (
    "tests/bench/test_instances.py",  # 20,000 instances through one daemon: ~3 min of both cores
    "tests/chaos",  # SIGKILLs and power cuts under load, restarts that replay the journal
    "tests/cluster",  # 3 NATS servers and 3 nodes per test
    "tests/faults",  # 3 NATS servers + 3 nodes in network namespaces, every fault kind once
    "tests/integration/test_studio_browser.py",  # a headless Chromium per test
    "tests/integration/test_forkserver_memory.py",  # 20 reloads and idle agents, RSS measured
)
"""The long drives: minutes of the suite spent on load, scale, browsers and memory budgets.
They run in `make test` and `make test-drives`; `make test-fast` (the developer loop) and
.ci/run's first stage leave them out with `-m "not drive"`. Marked here by path, so a new test
in one of these modules or directories is a drive without saying so."""


FIRST = "tests/bench/test_instances.py"
"""The longest test by far (a third of a full run's wall time on 2 cores) is collected last;
run first, it runs beside the rest on one xdist worker instead of alone after them."""

FOLLOWER = (
    "tests/cluster/test_startup.py"
    "::test_a_node_that_cannot_reach_nats_gives_up_with_the_coded_error"
)
"""A test of about a second, collected right after FIRST. An xdist worker takes the test after
the one it runs before that one starts (its teardown needs to know what comes next), and work
stealing (the Makefile's TEST_DIST) cannot move a test a worker took: the one after FIRST waits
out the whole drive. Should this id name no test any more, the order stays as collected."""


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> object:
    """Test modules are collected with bytecode writing on, whatever PYTHONDONTWRITEBYTECODE
    says: pytest keeps a test module's assertion-rewritten code in __pycache__ only when it
    may write bytecode, and rewrote all ~300 again in every session and xdist worker (~2
    CPU-s each, a dozen pytest processes in CI). Only collection: a test's own imports (and
    every child process) keep the setting."""
    saved = sys.dont_write_bytecode
    sys.dont_write_bytecode = False
    try:
        return (yield)
    finally:
        sys.dont_write_bytecode = saved


@pytest.hookimpl(tryfirst=True)  # before pytest's own hook deselects by `-m`
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    drives = [config.rootpath / path for path in DRIVES]
    for item in items:
        if any(item.path == path or path in item.path.parents for path in drives):
            item.add_marker(pytest.mark.drive)
    first = config.rootpath / FIRST
    # a stable sort: every xdist worker must collect the same order
    items.sort(key=lambda item: (item.path != first, item.nodeid != FOLLOWER))


def pytest_configure(config: pytest.Config) -> None:
    _interruptible_children()
    _quiet_controller_sqlite(config)


def _interruptible_children() -> None:
    """A shell without job control starts a background command (`make test &`, nohup) with
    SIGINT ignored, and an ignored signal stays ignored across fork and exec: every process
    the tests start would ignore the Ctrl-C that the interrupt tests send it (`instance show
    --follow` then never ends). A handler is reset to the default at exec, so installing
    Python's own makes each child start with SIGINT as on a terminal."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _quiet_controller_sqlite(config: pytest.Config) -> None:
    """In pytest-xdist's controller, which runs no test and none of our code that opens SQLite,
    an unclosed `sqlite3.Connection` is not an error of ours (the one thing there that opens
    SQLite is pytest-cov combining the workers' coverage data files): collected by pytest's
    last garbage collection, it failed one CI run in four on Python 3.13 (which warns of
    unclosed connections) after every test had passed. Only that warning, only in the
    controller: a worker's and a `-n 0` run's leaks stay errors."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    # pytest_configure runs inside the session's configured-warnings context, which is still
    # in force when pytest's unconfigure reports unraisable exceptions
    warnings.filterwarnings(
        "ignore",
        message=r"Exception ignored in: <sqlite3\.Connection object",
        category=pytest.PytestUnraisableExceptionWarning,
    )


PREPARED = (
    "tests/bench/test_instances.py",  # 20,000 new instances: what the steps make cheaper
    "tests/integration/test_forkserver_memory.py",  # what the steps save, measured
)
"""The tests whose daemons run their fork server's preparation steps (agent_process/forkprep,
the product's default): the ones that measure what those steps are for. The daemons of the
other integration, fuzz and drive tests run without them (`GOONDAN_FORK_WARM=0`)."""
WARM_ENV = "GOONDAN_FORK_WARM"


@pytest.fixture(autouse=True)
def _fork_server_unprepared(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The preparation steps cost a new daemon ~0.3 s of CPU and hold its first spawn as long
    (measured: 0.48 vs 0.79 CPU-seconds for a daemon's start, one send and its stop): memory
    optimizations the forkprep unit tests prove step by step and PREPARED measures, which
    the other daemons a run starts (a cluster test starts three, a chaos test restarts
    one again and again) paid for nothing but CI's minutes. An explicit GOONDAN_FORK_WARM
    (`GOONDAN_FORK_WARM=1 make test`: every test with them) is kept."""
    root = request.config.rootpath
    if WARM_ENV in os.environ or (root / "tests" / "unit") in request.node.path.parents:
        return  # the unit tests of forkprep say which steps they run
    if not any(request.node.path == root / path for path in PREPARED):
        monkeypatch.setenv(WARM_ENV, "0")


@pytest.fixture(autouse=True)
def _isolated_state_root(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    # Short path: ipc socket paths must stay under 107 bytes.
    root = tmp_path_factory.mktemp("st")
    monkeypatch.setenv("GOONDAN_STATE_ROOT", str(root))
    return root


@pytest.fixture
async def local_servers() -> AsyncIterator[tuple[int, int]]:
    """Two HTTP servers on 127.0.0.1 answering `tests.sandboxing.BODY`: (listed, left out)."""
    async for ports in sandboxing.local_servers():
        yield ports
