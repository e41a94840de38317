"""Issue 29's proof: a package `goondan package new` writes, built into a real wheel (setuptools
from the venv, no build isolation, offline) and installed by a real installer (`uv pip install
--no-deps --target`, no index), serves its Tool to a turn of a bundle that declares it with a
version range; a range it misses, the package not installed, and a lock it no longer matches
each give their coded error and exit 2."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tests.integration.harness import REPO, run_cli
from tests.integration.test_package_new import BUNDLE

UV = REPO / ".tools" / "bin" / "uv"


async def _tool(*args: str, cwd: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        str(UV), *args, cwd=cwd, env={"PATH": "/usr/bin:/bin", "UV_OFFLINE": "1",
                                      "UV_PYTHON_DOWNLOADS": "never", "UV_NO_CACHE": "1"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    async with asyncio.timeout(120):
        out, _ = await proc.communicate()
    assert proc.returncode == 0, out.decode()


async def test_a_built_wheel_serves_a_turn_and_each_mismatch_is_coded(tmp_path: Path) -> None:
    project = tmp_path / "triage"
    async with asyncio.timeout(60):
        code, _, err = await run_cli("package", "new", "@acme/triage", str(project))
    assert code == 0, err
    await _tool("build", "--quiet", "--no-build-isolation", "--wheel", "--python",
                sys.executable, "--out-dir", str(tmp_path / "dist"), cwd=project)  # fmt: skip
    wheel = next((tmp_path / "dist").glob("acme_triage-0.1.0-*.whl"))
    site = tmp_path / "site"
    await _tool("pip", "install", "--quiet", "--no-deps", "--python", sys.executable,
                "--target", str(site), str(wheel), cwd=tmp_path)  # fmt: skip
    assert (site / "acme_triage-0.1.0.dist-info" / "RECORD").is_file()
    env = {"PYTHONPATH": f"{site}:{REPO}"}
    bundle = tmp_path / "b" / "goondan.yaml"
    bundle.parent.mkdir()
    bundle.write_text(BUNDLE)
    async with asyncio.timeout(60):
        code, _, err = await run_cli("package", "lock", "--bundle", str(bundle), env=env)
    assert code == 0, err
    async with asyncio.timeout(90):
        code, out, err = await run_cli("run", str(bundle), "--frozen", "--input", "hi", env=env)
    assert code == 0, err
    assert "hello, Ada" in out

    outside = tmp_path / "c" / "goondan.yaml"
    outside.parent.mkdir()
    outside.write_text(BUNDLE.replace('">=0.1,<1"', '">=1,<2"'))
    async with asyncio.timeout(60):
        code, _, err = await run_cli("run", str(outside), "--input", "hi", env=env)
    assert (code, "E_PACKAGE_VERSION" in err, "@acme/triage" in err) == (2, True, True)
    async with asyncio.timeout(60):
        code, _, err = await run_cli("run", str(bundle), "--input", "hi",
                                     env={"PYTHONPATH": str(REPO)})  # fmt: skip
    assert (code, "E_PACKAGE_NOT_INSTALLED" in err, "@acme/triage" in err) == (2, True, True)
    tool = site / "acme_triage" / "tools" / "greet.py"
    tool.write_text(tool.read_text() + "\n# edited after the lock\n")
    async with asyncio.timeout(60):
        code, _, err = await run_cli("run", str(bundle), "--frozen", "--input", "hi", env=env)
    assert (code, "E_LOCK_STALE" in err, "@acme/triage" in err) == (2, True, True)
