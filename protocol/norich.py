"""Our processes import structlog without `rich`, which structlog uses whenever it can import it.

A development install has rich (twine, hypothesis and import-linter need it) and a user's
environment may too. structlog's console renderer and traceback helpers then import it, with
pygments and ~100 modules: ~38 ms more at each daemon, CLI command and cold child start (a
fork server's memory hardly changes: its preparation fills the heap either way). goondan uses
none of it: `bundles.logsetup` renders exceptions as text before any renderer sees them. So each
entry point imports its code inside `WithoutRich()`: structlog, imported there, finds no rich
and takes its plain fallbacks. Afterwards rich imports normally again, for a user's tool that
wants it. Standard library only, and no contextlib: `goondan send` loads this too.
"""

from __future__ import annotations

import sys
from types import TracebackType

RICH = "rich"


class WithoutRich:
    """Within: `import rich` raises ImportError (unless rich was imported before)."""

    def __enter__(self) -> None:
        self.hid = RICH not in sys.modules
        if self.hid:
            sys.modules[RICH] = None  # type: ignore[assignment]  # the import system's "absent"

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.hid and RICH in sys.modules and sys.modules[RICH] is None:
            del sys.modules[RICH]
