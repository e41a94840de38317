"""ARCHITECTURE.md §2 is enforced: the import contracts hold, and a deliberate violation breaks
them.

Files under bundles/base and bundles/examples are loaded by path inside agent processes, so
import-linter cannot see them; an AST check covers them here and in `make lint`.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("protocol", "bundles", "orchestrator", "agent_process")
BY_PATH_DIRS = (ROOT / "bundles" / "base", ROOT / "bundles" / "examples")
FORBIDDEN_IN_BY_PATH = ("agent_process", "orchestrator")


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
        shutil.copytree(
            ROOT / pkg, dst / pkg, ignore=shutil.ignore_patterns("__pycache__", "base", "examples")
        )


def test_contracts_hold_on_the_tree() -> None:
    result = _lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("module", "bad_import"),
    [
        ("orchestrator/_violation.py", "import agent_process\n"),
        ("agent_process/_violation.py", "import orchestrator\n"),
        ("protocol/_violation.py", "import bundles\n"),
        ("protocol/_violation2.py", "import zmq\n"),
        ("bundles/_violation.py", "import agent_process\n"),
    ],
)
def test_a_deliberate_violation_fails(tmp_path: Path, module: str, bad_import: str) -> None:
    _copy_tree(tmp_path)
    (tmp_path / module).write_text(bad_import)
    result = _lint_imports(tmp_path)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout


def _top_level_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module.split(".")[0])
    return names


def by_path_violations() -> list[str]:
    """Files loaded by path may use bundles.sdk/bundles.toolset, protocol and libraries only."""
    problems = []
    for base in BY_PATH_DIRS:
        for path in sorted(base.rglob("*.py")) if base.exists() else []:
            for name in _top_level_imports(path):
                if name in FORBIDDEN_IN_BY_PATH:
                    problems.append(f"{path.relative_to(ROOT)} imports {name}")
    return problems


def test_by_path_bundle_files_import_only_the_sdk() -> None:
    assert by_path_violations() == []


def test_by_path_check_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "tool.py"
    bad.write_text("from agent_process.runtime import AgentRuntime\n")
    assert _top_level_imports(bad) == ["agent_process"]
