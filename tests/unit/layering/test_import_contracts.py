"""ARCHITECTURE.md §2 is enforced: the import contracts hold, and a deliberate violation breaks
them.

Files under bundles/base and bundles/examples are loaded by path inside agent processes, so
import-linter's graph cannot see them; the `by_path` contract type (by_path.py) reads them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("protocol", "bundles", "orchestrator", "agent_process")
# the by_path contract type lives here; lint-imports imports it from the tree it checks
CONTRACT_TYPE = ("tests", "tests/unit", "tests/unit/layering")


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(exe), "--config", str(cwd / "pyproject.toml")],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(cwd), "PATH": "/usr/bin:/bin"},
        check=False,
    )


def _copy_tree(dst: Path) -> None:
    shutil.copy(ROOT / "pyproject.toml", dst / "pyproject.toml")
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, dst / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for package in CONTRACT_TYPE:
        (dst / package).mkdir(exist_ok=True)
        (dst / package / "__init__.py").touch()
    shutil.copy(ROOT / CONTRACT_TYPE[-1] / "by_path.py", dst / CONTRACT_TYPE[-1] / "by_path.py")


def test_contracts_hold_on_the_tree() -> None:
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


VIOLATIONS = [
    ("orchestrator/_violation.py", "import agent_process\n"),
    ("agent_process/_violation.py", "import orchestrator\n"),
    ("protocol/_violation.py", "import bundles\n"),
    ("protocol/_violation2.py", "import zmq\n"),
    ("bundles/_violation.py", "import agent_process\n"),
    # uvloop: only the daemon's and a child's entry points choose the event loop
    ("orchestrator/_violation.py", "import uvloop\n"),
    ("agent_process/_violation.py", "def run() -> None:\n    import uvloop\n"),
    ("bundles/_violation.py", "from uvloop import run\n"),
    # files loaded by path: of ours, only bundles.sdk and protocol
    ("bundles/base/tools/_violation.py", "from bundles.toolset import Toolset\n"),
    ("bundles/base/tools/_violation.py", "from bundles import codecache\n"),
    ("bundles/examples/_violation.py", "import orchestrator.daemon\n"),
    ("bundles/base/connectors/_violation.py", "from agent_process import child\n"),
    # a sibling by name outside `if TYPE_CHECKING:` would be a second copy of the file
    ("bundles/base/tools/_violation.py", "from bundles.base.tools import _contain\n"),
    # the orchestrator's rooms (ARCHITECTURE.md §1): only the rooms below
    ("orchestrator/supervision/_violation.py", "from orchestrator.control import client\n"),
    ("orchestrator/routing/_violation.py", "import orchestrator.observe.metrics\n"),
    ("orchestrator/calls/_violation.py", "from orchestrator.ingress import accept\n"),
    ("orchestrator/control/_violation.py", "from orchestrator.cluster import node\n"),
    ("orchestrator/observe/_violation.py", "from orchestrator import daemon\n"),
    ("orchestrator/reload/_violation.py", "from orchestrator.routing import router\n"),
    ("orchestrator/exitcodes.py", "from orchestrator.supervision import table\n"),
    ("orchestrator/swarm/_violation.py", "from orchestrator.calls import auth\n"),
    ("orchestrator/evals/_violation.py", "from orchestrator.commands import run\n"),
]  # fmt: skip
"""Each a file of its own (`_violation.py` numbered) or a line added to a real module."""


def _placed(index: int, module: str) -> str:
    path = Path(module)
    if path.stem.startswith("_violation"):
        path = path.with_name(f"{path.stem}_{index}.py")
    return str(path)


@pytest.fixture(scope="module")
def violated(tmp_path_factory: pytest.TempPathFactory) -> str:
    """lint-imports' report on a copy of the tree with every violation added at once: one run
    (~0.4 CPU-s) instead of one per violation; each is named in the report, which lists every
    illegal import of each broken contract."""
    root = tmp_path_factory.mktemp("violated")
    _copy_tree(root)
    for index, (module, bad_import) in enumerate(VIOLATIONS):
        target = root / _placed(index, module)
        target.write_text((target.read_text() if target.exists() else "") + bad_import)
    result = _lint_imports(root)
    assert result.returncode != 0 and "BROKEN" in result.stdout, result.stdout + result.stderr
    return result.stdout


@pytest.mark.parametrize(("index", "module", "bad_import"),
                         [(i, *v) for i, v in enumerate(VIOLATIONS)])  # fmt: skip
def test_a_deliberate_violation_fails(
    violated: str, index: int, module: str, bad_import: str
) -> None:
    placed = _placed(index, module)
    assert placed.removesuffix(".py").replace("/", ".") in violated or placed in violated


def test_the_by_path_contract_allows_the_sdk_protocol_and_typed_siblings(tmp_path: Path) -> None:
    _copy_tree(tmp_path)
    (tmp_path / "bundles/base/tools/_allowed.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from bundles import sdk\n"
        "from bundles.sdk import ToolFailed, load_sibling\n"
        "import protocol.errors\n"
        "if TYPE_CHECKING:\n"
        "    from bundles.base.tools import _contain\n"
        "else:\n"
        "    _contain = load_sibling(__file__, '_contain')\n"
    )
    result = _lint_imports(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
