"""What a Tool's sandbox hides, handed to its handlers as `ctx.config["sandbox"]`.

The Tool says how (`Tool.spec.sandbox`: a mode, or `{mode, network}`); the agent process knows
what the daemon keeps for itself, which a command must not see: the whole state root (other
instances, logs, the journal, secrets, pending calls), the run and log roots systemd may put
elsewhere, the env files with API keys (the bundle's `.env`, `.env.local`, each `--env-file`)
and systemd's credentials of the service (CREDENTIALS_DIRECTORY).
`bundles/base/tools/_sandbox.py` turns that into a bubblewrap command line.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import structlog

from bundles.envfiles import DEFAULT_ENV_FILES
from bundles.kinds import SandboxMode, SandboxNetwork, ToolSandbox, ToolSpec
from bundles.model import Bundle, Resource
from protocol.endpoints import StateLayout

_log = structlog.get_logger("goondan.sandbox")


Network = bool | dict[str, list[str]]
"""What `_sandbox` reads as `network`: true, false or `{"allow": [entries]}`."""


def _allow(network: SandboxNetwork) -> Network:
    return {"allow": list(network.allow)}


def mode_and_network(spec: ToolSpec) -> tuple[SandboxMode, Network]:
    """`sandbox: off` (YAML's false too), `sandbox: auto`, or `{mode, network}`."""
    given = spec.sandbox
    network: Network = True
    if isinstance(given, ToolSandbox):
        network = given.network if isinstance(given.network, bool) else _allow(given.network)
        given = given.mode
    if given is False:
        return "off", network
    return ("auto" if given is True else given), network


def hidden_paths(bundle: Bundle, layout: StateLayout, env_files: Iterable[Path]) -> list[str]:
    """Everything of the daemon's that a sandboxed command must not see."""
    paths = [layout.root, layout.run_root, layout.logs_root]
    paths += [bundle.root / name for name in DEFAULT_ENV_FILES]
    paths += list(env_files)
    credentials = os.environ.get("CREDENTIALS_DIRECTORY")
    if credentials:
        paths.append(Path(credentials))
    return sorted({str(p.absolute()) for p in paths if p is not None})


def tool_config(
    tool: Resource[ToolSpec], config: Mapping[str, Any], hide: list[str]
) -> dict[str, Any]:
    """`config` plus the Tool's sandbox; `sandbox: off` is logged (at every agent start)."""
    mode, network = mode_and_network(tool.spec)
    if mode == "off":
        _log.warning("sandbox_off", tool=tool.name, package=tool.package)
    return {**config, "sandbox": {"mode": mode, "network": network, "hide": hide}}
