"""Throwaway Python distributions that serve goondan packages, for the package tests.

`add_distribution(site, ...)` writes what importlib.metadata reads of an installed wheel (a
`*.dist-info` directory with METADATA and entry_points.txt) and the package's module directory
beside it, into `site`: a directory the test puts on `sys.path` (unit tests) or `PYTHONPATH`
(the CLI in a subprocess). No pip, no network: the metadata is exactly what an installer writes.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

TOOL_PY = """\
def hello(ctx, args):
    return {"hello": "from-the-package"}


handlers = {"hello": hello}
"""


def package_yaml(name: str, tools: tuple[str, ...] = ("github",), extra: str = "") -> str:
    """A package's goondan.yaml: its Package document, then one Tool per name."""
    docs = [
        f'apiVersion: goondan.ai/v1\nkind: Package\nmetadata:\n  name: "{name}"\n'
        f'spec:\n  version: "1.0.0"\n'
    ]
    for tool in tools:
        docs.append(
            "apiVersion: goondan.ai/v1\nkind: Tool\n"
            f"metadata:\n  name: {tool}\n  labels: {{tier: extra}}\n"
            "spec:\n  entry: ./tools/tool.py\n  exports: [{name: hello}]\n"
        )
    if extra:
        docs.append(textwrap.dedent(extra))
    return "---\n".join(docs)


def add_distribution(
    site: Path,
    distribution: str,
    version: str,
    entries: dict[str, str],
    *,
    yaml: str | None = None,
) -> Path:
    """Install `distribution` into `site`: entry points `entries` (package name -> module) and,
    when `yaml` is given, the first entry's module directory with that goondan.yaml and a
    tool file. Returns the module directory."""
    stem = distribution.replace("-", "_")
    info = site / f"{stem}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n"
    )
    lines = ["[goondan.packages]"] + [f"{name} = {module}" for name, module in entries.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    module = next(iter(entries.values()), stem).split(":")[0]
    directory = site.joinpath(*module.split("."))
    if yaml is not None:
        (directory / "tools").mkdir(parents=True)
        (directory / "__init__.py").write_text("")
        (directory / "tools" / "tool.py").write_text(TOOL_PY)
        (directory / "goondan.yaml").write_text(yaml)
    return directory
