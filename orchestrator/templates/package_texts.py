"""The files `goondan package new` writes: a ready Python distribution serving a goondan package.

`render(name)` fills them in for a package name such as `@acme/triage`: the distribution is
`acme-triage`, the module `acme_triage` (README's "Packages" section; docs/guides/packages.md).
The setuptools backend is the one goondan itself builds with, so a wheel builds offline with
`pip wheel --no-build-isolation --no-deps .`.
"""

from __future__ import annotations

import re

_PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "The goondan package {name}"
requires-python = ">=3.11"
readme = "README.md"

# goondan finds the package through this entry point: name -> the module whose directory
# holds goondan.yaml.
[project.entry-points."goondan.packages"]
"{name}" = "{module}"

[tool.setuptools]
packages = ["{module}", "{module}.tools", "{module}.connectors"]

# The YAML and the handler files ship in the wheel.
[tool.setuptools.package-data]
"{module}" = ["goondan.yaml"]
"""

_YAML = """\
# {name}: a goondan package. A bundle declares it in its Package document,
#   spec: {{dependencies: {{"{name}": ">=0.1,<1"}}}}
# and references its resources with package: "{name}".
apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: "{name}"
spec:
  version: "0.1.0"
  description: The goondan package {name}.
---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: {short}
spec:
  entry: ./tools/greet.py
  exports:
    - name: greet
      description: Greet someone by name.
      parameters:
        type: object
        additionalProperties: false
        properties:
          name: {{type: string, description: who to greet}}
        required: [name]
---
apiVersion: goondan.ai/v1
kind: Connector
metadata:
  name: {short}-ticker
spec:
  entry: ./connectors/ticker.py
  events:
    - name: tick
  config:
    intervalSeconds: 60      # one `tick` event this often
"""

_TOOL = '''\
"""The `greet` export of the {short} tool: a handler takes (ctx, args) and returns JSON data."""

from __future__ import annotations

from typing import Any

from bundles.sdk import ToolFailed


def greet(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    name = str(args.get("name", "")).strip()
    if not name:
        raise ToolFailed("name is empty", code="E_GREET_NAME", suggestion="pass a name")
    return {{"greeting": f"hello, {{name}}"}}


handlers = {{"greet": greet}}
'''

_CONNECTOR = '''\
"""The {short}-ticker connector: one `tick` event every `config.intervalSeconds`."""

from __future__ import annotations

import asyncio

from bundles.sdk import ConnectorContext


async def run(ctx: ConnectorContext) -> None:
    interval = float(ctx.config.get("intervalSeconds", 60))
    while True:
        await asyncio.sleep(interval)
        await ctx.emit("tick", {{"connection": ctx.connection}}, "tick", reply=False)
'''

_TEST = '''\
"""The tool's handler called as the agent process calls it."""

from __future__ import annotations

import pytest

from bundles.sdk import ToolFailed
from {module}.tools.greet import greet


def test_greets() -> None:
    assert greet(None, {{"name": "Ada"}}) == {{"greeting": "hello, Ada"}}


def test_empty_name_is_refused() -> None:
    with pytest.raises(ToolFailed):
        greet(None, {{"name": " "}})
'''

_README = """\
# {name}

A goondan package: the Tool `{short}` (export `greet`) and the Connector `{short}-ticker`.

    goondan package check          # validate it as a publisher would
    python -m pytest tests         # the tool's tests
    pip wheel --no-build-isolation --no-deps -w dist .   # build the wheel
    goondan package add ./dist/{wheel_stem}-0.1.0-py3-none-any.whl --bundle ../my-bundle

In a bundle: `{{kind: Tool, name: {short}, package: "{name}"}}`.
"""


def names(name: str) -> tuple[str, str, str]:
    """(distribution, module, short name) for a package name `@scope/name` or `name`."""
    plain = name.lstrip("@").replace("/", "-")
    module = re.sub(r"[^0-9a-zA-Z]+", "_", plain).strip("_").lower()
    # a resource name takes letters, digits, '-' and '_' only, never '__' (bundles.naming)
    short = re.sub(r"_{2,}", "_", re.sub(r"[^A-Za-z0-9_-]", "-", name.rsplit("/", 1)[-1]))
    return plain.lower(), module, short


def render(name: str) -> dict[str, str]:
    dist, module, short = names(name)
    fill = {"name": name, "dist": dist, "module": module, "short": short}
    fill["wheel_stem"] = module
    return {
        "pyproject.toml": _PYPROJECT.format(**fill),
        "README.md": _README.format(**fill),
        f"{module}/__init__.py": "",
        f"{module}/goondan.yaml": _YAML.format(**fill),
        f"{module}/tools/__init__.py": "",
        f"{module}/tools/greet.py": _TOOL.format(**fill),
        f"{module}/connectors/__init__.py": "",
        f"{module}/connectors/ticker.py": _CONNECTOR.format(**fill),
        "tests/test_greet.py": _TEST.format(**fill),
    }
