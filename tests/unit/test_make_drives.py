"""`make test-drives` collects only the drives' files (Makefile DRIVE_PATHS), while
tests/conftest.py DRIVES marks them: a path in one list and not the other would be a drive that
no target runs (test-fast leaves it out as a drive, test-drives never collects it)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import DRIVES
from tests.integration.harness import REPO


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_test_drives_collects_exactly_the_marked_paths() -> None:
    argv = ["make", "-n", "--no-print-directory", "test-drives", "PYTEST_ARGS="]  # -n: print only
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60, check=True)
    pytest_line = next(line for line in done.stdout.splitlines() if " -m pytest " in line)
    assert '-m "drive and not quarantine"' in pytest_line
    words = pytest_line.split()
    assert words[-len(DRIVES) :] == list(DRIVES)
    for path in DRIVES:
        assert (REPO / path).exists(), path
