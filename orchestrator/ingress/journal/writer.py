"""The embedded journal's writer thread: queued operations, one transaction per batch.

Every operation the event loop asks for goes on a queue; the thread takes everything queued, runs
it in one transaction (each operation in its own savepoint, so one that fails leaves nothing
half done) and commits once (one fsync of the WAL for the batch), then resolves each caller's
future.

The thread never dies silently (issue 27, F10). An operation that raises fails only its caller:
an SQLite error as `E_JOURNAL_WRITE`, anything else (a bug) as `E_JOURNAL_FAILED`, logged
`journal_op_failed`. Should the loop itself fail, it is logged `journal_thread_failed`, every
caller waiting or to come gets `E_JOURNAL_FAILED`, and `ended()` raises it: the daemon watches
it and stops, since it can no longer accept an event durably. Waiting for the thread to end is
a future the thread settles, never a join in a worker thread, so a caller can bound the wait
(a wedged journal must not keep SIGTERM from stopping the daemon).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import structlog

from orchestrator.ingress.journal import JournalError
from protocol.errors import ErrorCode

BATCH_MAX = 512
T = TypeVar("T")
Op = Callable[[sqlite3.Connection], Any]
Item = tuple[Op, asyncio.Future[Any]]
_STOP = object()
log = structlog.get_logger("goondan.journal")


class Writer:
    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.path = path
        self._conn = conn
        self._ops: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closing = False
        self._exited = False
        self._waiters: list[asyncio.Future[None]] = []
        self._batch: list[Item] = []
        self.failure: JournalError | None = None
        """Why the thread stopped on its own (None while it runs, or after a clean close)."""
        self.commits = 0
        """Transactions committed (each is one fsync): appends / commits is the batch size."""
        self._thread = threading.Thread(target=self._main, name="journal", daemon=True)
        self._thread.start()

    async def submit(self, op: Callable[[sqlite3.Connection], T]) -> T:
        return await self.post(op)

    def post(self, op: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        """Queued now (before anything posted later), its future resolved after its batch."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        with self._lock:  # under the lock: a failing thread fails what was queued before it
            if self.failure is not None:
                future.set_exception(self.failure)
            elif self._closing:
                future.set_exception(JournalError(
                    ErrorCode.E_JOURNAL_WRITE, f"{self.path} is closed",
                    "the daemon is stopping: send again once it runs"))  # fmt: skip
            else:
                self._ops.put((op, future))
        return future

    async def ended(self) -> None:
        """When the thread has ended: returns after `stop()`, raises JournalError when it
        failed on its own."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            if not self._exited:
                self._waiters.append(future)
            else:
                future.set_result(None)
        await future
        if self.failure is not None:
            raise self.failure

    def stop(self) -> None:
        """Finish what is queued, then close the connection and end."""
        with self._lock:
            self._closing = True
        self._ops.put(_STOP)

    # -- the thread -----------------------------------------------------------------------

    def _main(self) -> None:
        try:
            self._loop()
        except BaseException as exc:
            self._fail(exc)
        finally:
            with self._lock:
                self._exited = True
                waiters, self._waiters = self._waiters, []
            for future in waiters:
                _resolve(future, None, None)

    def _loop(self) -> None:
        while True:
            batch = [self._ops.get()]
            while len(batch) < BATCH_MAX:
                try:
                    batch.append(self._ops.get_nowait())
                except queue.Empty:
                    break
            self._batch = [item for item in batch if item is not _STOP]
            self._run(self._batch)
            self._batch = []
            if any(item is _STOP for item in batch):
                self._conn.close()
                return

    def _run(self, batch: list[Item]) -> None:
        if not batch:
            return
        results: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            results = [(future, *self._one(op)) for op, future in batch]
            self._conn.execute("COMMIT")
            self.commits += 1
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")
            failed = _write_error(self.path, exc)
            results = [(future, None, failed) for _, future in batch]
        for future, value, error in results:
            _resolve(future, value, error)

    def _one(self, op: Op) -> tuple[Any, BaseException | None]:
        """(its value, None) or (None, why it failed), its changes undone when it failed."""
        conn = self._conn
        conn.execute("SAVEPOINT op")
        try:
            value = op(conn)
        except Exception as exc:
            conn.execute("ROLLBACK TO op")
            conn.execute("RELEASE op")
            if isinstance(exc, sqlite3.Error):
                return None, _write_error(self.path, exc)
            log.error("journal_op_failed", code=ErrorCode.E_JOURNAL_FAILED, path=str(self.path),
                      error=repr(exc))  # fmt: skip
            return None, JournalError(ErrorCode.E_JOURNAL_FAILED, f"a journal operation on "
                                      f"{self.path} failed: {exc!r}", "report this goondan "
                                      "bug with the journal_op_failed log line")  # fmt: skip
        conn.execute("RELEASE op")
        return value, None

    def _fail(self, exc: BaseException) -> None:
        failure = JournalError(
            ErrorCode.E_JOURNAL_FAILED,
            f"the journal's writer thread stopped on {exc!r}",
            f"restart the daemon; if it happens again, move {self.path} aside (its pending "
            "events are lost)",
        )
        log.error("journal_thread_failed", code=failure.code, path=str(self.path),
                  error=repr(exc))  # fmt: skip
        with self._lock:
            self.failure = failure
        with contextlib.suppress(sqlite3.Error):
            self._conn.close()
        for _, future in self._batch:
            _resolve(future, None, failure)
        while True:
            try:
                item = self._ops.get_nowait()
            except queue.Empty:
                return
            if item is not _STOP:
                _resolve(item[1], None, failure)


def _resolve(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    """From the thread: settle `future` in its loop."""
    with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
        future.get_loop().call_soon_threadsafe(_settle, future, value, error)


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():
        return  # the caller gave up (cancelled); the write itself happened or failed anyway
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


def _write_error(path: Path, exc: sqlite3.Error) -> JournalError:
    return JournalError(ErrorCode.E_JOURNAL_WRITE, f"{path}: {exc}",
                        "check the disk (space, permissions) under the state root")  # fmt: skip
