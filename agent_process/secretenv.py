"""Credentials leave the agent's reach once loaded (docs/operations.md, "Secrets are
redacted" and after).

A Tool's credentials are read once, when the agent loads it (`tool_config`): a value written
as a ValueSource becomes its value and `tokenEnv: NAME` gives the tool `token` (the rule is
`bundles.credentials.resolve_settings`). Once the model client, the tools and the MCP servers
are built, every variable whose value holds one of the bundle's secrets is removed from the
process environment (`drop_secret_variables`), so no subprocess a tool starts inherits it.
The environment block the kernel shows in /proc/<pid>/environ was overwritten before (the
process title, `agent_process.child.main`).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from bundles import credentials
from bundles.kinds import ValueSource
from bundles.model import Bundle
from bundles.redact import MIN_SECRET_LEN
from bundles.values import ValueProblem, value_of


def tool_config(bundle: Bundle, config: Mapping[str, Any], state_root: Path) -> Mapping[str, Any]:
    """`config` with its credentials read now (`config` itself when it has none)."""

    def lookup(vs: ValueSource) -> str | None:
        try:
            return value_of(bundle, vs, state_root=state_root)
        except ValueProblem:
            return None  # unset: the tool reports it when it is called, as before

    return credentials.resolve_settings(config, lookup)


_KEEP = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TERM", "TZ", "TMPDIR", "PWD",
     "PYTHONPATH", "VIRTUAL_ENV"}
)  # fmt: skip
"""What the process itself needs to run and find programs: a weak secret (`test1234`) that
happens to be part of a path does not make PATH a credential."""


def drop_secret_variables(
    secrets: Collection[str], environ: MutableMapping[str, str] = os.environ
) -> list[str]:
    """Remove every variable whose value holds a secret (but PATH, HOME, LANG, LC_* and the
    like); returns their names (never values)."""
    real = [s for s in secrets if len(s) >= MIN_SECRET_LEN]
    if not real:  # a bundle without secrets: no walk of the environment (each new agent's)
        return []
    names = [
        name
        for name, value in environ.items()
        if name not in _KEEP and not name.startswith("LC_") and any(s in value for s in real)
    ]
    for name in names:
        del environ[name]
    return sorted(names)
