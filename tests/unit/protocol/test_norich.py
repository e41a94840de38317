"""Our processes import structlog without rich (protocol/norich.py), and rich stays importable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.util import find_spec

import pytest

HAS_RICH = find_spec("rich") is not None


def _run(code: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_PROCESS_")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=60, check=True)  # fmt: skip
    out: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return out


AFTER = """
import structlog.dev, structlog.tracebacks
hidden = structlog.dev.rich is None and structlog.tracebacks.rich is None
loaded = "rich" in sys.modules
try:
    import rich.console
    later = True
except ImportError:
    later = False
print(json.dumps({"hidden": hidden, "loaded": loaded, "later": later}))
"""


def test_the_daemons_command_imports_structlog_without_rich() -> None:
    out = _run("import json, sys\nfrom orchestrator.cli import COMMANDS\n"
               "[info.load() for info in COMMANDS if info.name == 'run']\n" + AFTER)  # fmt: skip
    assert out == {"hidden": True, "loaded": False, "later": HAS_RICH}


def test_a_cold_child_imports_structlog_without_rich() -> None:
    # `python -m agent_process --help`: its imports done, the child prints its usage and exits
    code = ("import json, runpy, sys\nsys.argv = ['agent_process', '--help']\n"
            "try:\n    runpy.run_module('agent_process', run_name='__main__')\n"
            "except SystemExit:\n    pass\n" + AFTER)  # fmt: skip
    out = _run(code)
    assert out == {"hidden": True, "loaded": False, "later": HAS_RICH}


@pytest.mark.skipif(not HAS_RICH, reason="rich is not installed here")
def test_rich_imported_before_is_left_alone() -> None:
    out = _run("import json, sys, rich\nfrom protocol.norich import WithoutRich\n"
               "with WithoutRich():\n    import structlog\n" + AFTER)  # fmt: skip
    assert out == {"hidden": False, "loaded": True, "later": True}
