"""`goondan package lock` and `--frozen` through the real CLI: a lock written, then `validate
--frozen` and `run --frozen` pass; an installed package's version changed, a file of it edited in
place, a lock missing -> exit 2 with the code and the package's name.

The package is a throwaway distribution on the CLI's PYTHONPATH (tests/distributions.py).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

from tests.integration.harness import run_cli
from tests.integration.test_packages import _bundle, _site


async def _validate(bundle: Path, env: dict[str, str]) -> tuple[int, list[tuple[str, str]]]:
    async with asyncio.timeout(60):
        code, out, _ = await run_cli("validate", "--frozen", "--json", str(bundle), env=env)
    return code, [(e["code"], e["message"]) for e in json.loads(out)["errors"]]


async def test_lock_then_frozen_passes_and_a_change_is_refused(tmp_path: Path) -> None:
    env, module = _site(tmp_path)
    bundle = _bundle(tmp_path / "b", ">=1.2,<2")
    code, errors = await _validate(bundle, env)
    assert (code, [c for c, _ in errors]) == (2, ["E_LOCK_MISSING"])

    async with asyncio.timeout(60):
        code, out, err = await run_cli("package", "lock", "--bundle", str(bundle), env=env)
    assert code == 0, err
    lock = (bundle.parent / "goondan.lock").read_text()
    assert '[packages."@acme/github"]' in lock and 'version = "1.4.0"' in lock
    assert '[packages."@goondan/base"]' in lock
    assert await _validate(bundle, env) == (0, [])
    async with asyncio.timeout(90):
        code, out, err = await run_cli("run", str(bundle), "--frozen", "--input", "hi", env=env)
    assert code == 0, err
    assert "from-the-package" in out

    # a file of the package edited in place (as in an editable install)
    (module / "tools" / "tool.py").write_text("handlers = {}\n")
    code, errors = await _validate(bundle, env)
    assert code == 2
    assert [c for c, _ in errors] == ["E_LOCK_STALE"]
    assert errors[0][1].startswith("@acme/github: acme-github 1.4.0's files changed")
    async with asyncio.timeout(60):
        code, _, err = await run_cli("run", str(bundle), "--frozen", "--input", "hi", env=env)
    assert code == 2
    assert "E_LOCK_STALE" in err and "@acme/github" in err

    # another version installed
    site = tmp_path / "site"
    shutil.move(site / "acme_github-1.4.0.dist-info", site / "acme_github-1.5.0.dist-info")
    meta = site / "acme_github-1.5.0.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("1.4.0", "1.5.0"))
    code, errors = await _validate(bundle, env)
    assert code == 2
    assert errors == [
        ("E_LOCK_STALE", "@acme/github: locked acme-github 1.4.0, installed acme-github 1.5.0")
    ]


async def test_a_hostile_lock_is_a_coded_error(tmp_path: Path) -> None:
    env, _ = _site(tmp_path)
    bundle = _bundle(tmp_path / "b", ">=1.2,<2")
    (bundle.parent / "goondan.lock").write_text('[packages."@acme/github"]\nversion = 3\n')
    code, errors = await _validate(bundle, env)
    assert (code, [c for c, _ in errors]) == (2, ["E_LOCK_INVALID"])
