"""`goondan package add` through the real CLI, into a throwaway venv (never .venv): a package
written by `package new` and packed as a wheel is installed by pip offline, and the bundle's
Package document gains its dependency with every comment kept; `validate` then passes.

The wheel is packed here (a zip with the *.dist-info an installer reads): the venv has no
setuptools to build one offline. goondan is importable in the venv through a .pth file adding
.venv's site-packages.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import shutil
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.integration.harness import run_cli

BUNDLE = """\
# my bundle: this comment stays
apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: uses-triage   # and this one
spec:
  version: "1.0.0"
---
# the Model
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: fake}
spec: {provider: scripted, model: test}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: main}
spec:
  modelConfig: {modelRef: fake}
  tools: [{ref: triage, package: "@acme/triage"}]
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: triage-user}
spec: {entryAgent: main, agents: [main]}
"""


def _wheel(project: Path, out: Path) -> Path:
    """acme_triage-0.1.0-py3-none-any.whl from the project `package new` wrote."""
    info = "acme_triage-0.1.0.dist-info"
    files = {
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: acme-triage\nVersion: 0.1.0\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
        f"{info}/entry_points.txt": b"[goondan.packages]\n@acme/triage = acme_triage\n",
    }
    for path in sorted((project / "acme_triage").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            files[path.relative_to(project).as_posix()] = path.read_bytes()
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    wheel = out / "acme_triage-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return wheel


async def _venv(where: Path) -> Path:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "venv", str(where))
    async with asyncio.timeout(60):
        assert await proc.wait() == 0
    python = where / "bin" / "python"
    site = next((where / "lib").glob("python*/site-packages"))
    # 3.11's ensurepip puts setuptools 65 in every new venv, ahead of the environment's (too
    # old to build a wheel without the `wheel` package): the build takes the environment's
    names = ("setuptools*", "pkg_resources", "_distutils_hack", "distutils-precedence.pth")
    for bundled in [path for name in names for path in site.glob(name)]:
        if bundled.is_dir():
            shutil.rmtree(bundled)
        else:
            bundled.unlink()
    # .venv's site-packages as a site dir: its own .pth files (goondan's editable install) apply
    dev = sysconfig.get_paths()["purelib"]
    (site / "goondan-dev.pth").write_text(f"import site; site.addsitedir({dev!r})\n")
    return python


async def _cli(python: Path, *args: str) -> tuple[int, str, str]:
    offline = {"PIP_NO_INDEX": "1", "PIP_NO_DEPS": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env = {**os.environ, **offline, "PATH": f"{python.parent}:/usr/bin:/bin"}
    env.pop("PYTHONPATH", None)
    proc = await asyncio.create_subprocess_exec(
        str(python), "-m", "orchestrator", *args, env=env, cwd=python.parent,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(120):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_add_installs_the_wheel_and_declares_it(tmp_path: Path) -> None:
    project = tmp_path / "triage"
    async with asyncio.timeout(60):
        code, _, err = await run_cli("package", "new", "@acme/triage", str(project))
    assert code == 0, err
    wheel = _wheel(project, tmp_path)
    python = await _venv(tmp_path / "venv")
    bundle = tmp_path / "b" / "goondan.yaml"
    bundle.parent.mkdir()
    bundle.write_text(BUNDLE)
    code, out, err = await _cli(python, "package", "add", str(wheel), "--bundle", str(bundle))
    assert code == 0, out + err
    expected = BUNDLE.replace(
        'spec:\n  version: "1.0.0"\n',
        'spec:\n  version: "1.0.0"\n  dependencies:\n    "@acme/triage": ">=0.1.0,<0.2"\n',
        1,
    )
    assert bundle.read_text() == expected
    code, out, err = await _cli(python, "validate", str(bundle))
    assert code == 0, out + err
    # a second add of the same wheel: already installed, the entry is rewritten in place
    code, out, err = await _cli(python, "package", "add", str(wheel), "--bundle", str(bundle))
    assert code == 0, out + err
    assert bundle.read_text() == expected
    # not a wheel at all: the installer's failure, coded, and the bundle untouched
    code, _, err = await _cli(python, "package", "add", str(tmp_path / "none.whl"),
                              "--bundle", str(bundle))  # fmt: skip
    assert (code, "E_PACKAGE_INSTALL" in err) == (1, True)
    assert bundle.read_text() == expected
    # an option in SPEC's place is refused before any installer runs
    code, _, _ = await _cli(python, "package", "add", "--bundle", str(bundle), "--",
                            "--index-url=http://127.0.0.1:9/")  # fmt: skip
    assert code == 2
    assert bundle.read_text() == expected


async def test_add_a_source_directory_builds_installs_and_declares_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`goondan package add ./triage`: the installer builds the project `package new` wrote
    (setuptools from the environment goondan runs in: no index, no build isolation)."""
    project = tmp_path / "triage"
    async with asyncio.timeout(60):
        code, _, err = await run_cli("package", "new", "@acme/triage", str(project))
    assert code == 0, err
    python = await _venv(tmp_path / "venv")
    bundle = tmp_path / "b" / "goondan.yaml"
    bundle.parent.mkdir()
    bundle.write_text(BUNDLE)
    monkeypatch.setenv("PIP_NO_BUILD_ISOLATION", "0")  # pip reads "0" as: no isolation
    code, out, err = await _cli(python, "package", "add", str(project), "--bundle", str(bundle))
    assert code == 0, out + err
    assert '    "@acme/triage": ">=0.1.0,<0.2"\n' in bundle.read_text()
    assert bundle.read_text().startswith("# my bundle: this comment stays\n")
    code, out, err = await _cli(python, "validate", str(bundle))
    assert code == 0, out + err
