"""A systemd unit for one bundle (`goondan service print-unit`): pure text from `UnitSpec`.

The choices, each of which keeps the daemon working under the sandbox:
- `Type=notify` + `NotifyAccess=main`: only the orchestrator (not an agent child) may say
  READY/STOPPING/WATCHDOG; `WatchdogSec` restarts a daemon whose broker stopped turning.
- `KillMode=mixed`: SIGTERM goes to the orchestrator alone, which drains its children over
  ZeroMQ; whatever is left when `TimeoutStopSec` (grace period + margin) ends gets SIGKILL.
- Directories come from systemd (`StateDirectory`, `RuntimeDirectory`, `LogsDirectory`), so
  `ProtectSystem=strict` can make the rest of the file system read-only.
- `ProtectHome=read-only`, not `yes`: the bundle, the virtualenv or the state root may live
  under /home; the daemon only reads there unless the state root is there (ReadWritePaths).
- No `MemoryDenyWriteExecute` (libffi closures in the model SDKs need W+X pages) and no
  `SystemCallFilter` (agents' bash tools run arbitrary programs).
- User units (`--user`) skip the mount-namespace options: an unprivileged user manager can
  only apply them with user namespaces, which many hosts disable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

WATCHDOG_SEC = 30
STOP_MARGIN_SEC = 15
"""TimeoutStopSec = the swarm's grace period + this, so a drain ends before SIGKILL."""


@dataclass(frozen=True, slots=True)
class UnitSpec:
    name: str
    """The unit's name without `.service`; also names the runtime directory."""
    swarm: str
    bundle: Path
    """Absolute path of goondan.yaml."""
    exec_argv: Sequence[str]
    """The command that runs `goondan` (absolute interpreter or script path first)."""
    grace_period: float = 30.0
    user_unit: bool = False
    state_root: Path | None = None
    """A state root chosen by the operator; None uses systemd's StateDirectory."""
    env_files: Sequence[Path] = field(default_factory=tuple)
    run_as: str | None = None
    """`User=` of a system unit (the operator who generated it); None runs as root."""
    writable: Sequence[Path] = field(default_factory=tuple)
    """More directories the agents may write to (absolute tool roots)."""
    docs: Path | None = None
    """goondan's operations page on this machine (a checkout's docs/), for `Documentation=`."""


def escape_value(text: str) -> str:
    """A value systemd reads back verbatim: `%` specifiers and `$` variables escaped."""
    return text.replace("%", "%%").replace("$", "$$")


def quote_word(text: str) -> str:
    """One word of a command line or space-separated list, quoted when it has to be."""
    escaped = escape_value(text)
    if escaped and not any(c.isspace() or c in "\"'\\;" for c in escaped):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _exec_start(spec: UnitSpec) -> str:
    # The state root travels as GOONDAN_STATE_ROOT, not --state-root, so an operator's
    # `goondan status` with the same variable finds the same daemon.
    argv = [*spec.exec_argv, "run", str(spec.bundle), "--swarm", spec.swarm]
    argv += ["--log-format", "json"]
    for env_file in spec.env_files:
        argv += ["--env-file", str(env_file)]
    return " ".join(quote_word(a) for a in argv)


def _unit_section(spec: UnitSpec) -> list[str]:
    lines = [
        "[Unit]",
        f"Description=goondan swarm {spec.swarm} ({escape_value(str(spec.bundle))})",
        "Documentation=man:systemd.service(5)",
    ]
    if spec.docs is not None:
        lines.append(f"Documentation={escape_value(spec.docs.as_uri())}")
    if not spec.user_unit:
        lines += ["Wants=network-online.target", "After=network-online.target"]
    lines += ["StartLimitIntervalSec=300", "StartLimitBurst=5", ""]
    return lines


def _service_section(spec: UnitSpec) -> list[str]:
    stop_timeout = int(spec.grace_period) + STOP_MARGIN_SEC
    # %S is systemd's state directory, where StateDirectory=goondan lives.
    state = escape_value(str(spec.state_root)) if spec.state_root is not None else "%S/goondan"
    lines = ["[Service]", "Type=notify", "NotifyAccess=main"]
    if spec.run_as is not None and not spec.user_unit:
        lines.append(f"User={spec.run_as}")
    lines += [
        f"ExecStart={_exec_start(spec)}",
        "# SIGHUP re-reads the bundle and restarts only what changed.",
        "ExecReload=/bin/kill -HUP $MAINPID",
        f"WorkingDirectory={escape_value(str(spec.bundle.parent))}",
        quote_env(f"GOONDAN_STATE_ROOT={state}"),
        "Environment=PYTHONUNBUFFERED=1",
        "# API keys: the bundle's .env is read by goondan itself; or keep them here (mode 0600):",
        f"# EnvironmentFile=/etc/goondan/{spec.name}.env",
        f"WatchdogSec={WATCHDOG_SEC}",
        "# Only the orchestrator gets SIGTERM; it drains its agent processes itself.",
        "KillMode=mixed",
        f"TimeoutStopSec={stop_timeout}",
        "Restart=on-failure",
        "RestartSec=5",
        f"RuntimeDirectory={spec.name}",
        "RuntimeDirectoryMode=0700",
        "StateDirectory=goondan",
        "StateDirectoryMode=0700",
        "LogsDirectory=goondan",
        "LogsDirectoryMode=0700",
        "UMask=0077",
        f"SyslogIdentifier={spec.name}",
        "",
    ]
    return lines


def quote_env(assignment: str) -> str:
    if any(c.isspace() for c in assignment):
        return 'Environment="' + assignment.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f"Environment={assignment}"


def _sandbox_section(spec: UnitSpec) -> list[str]:
    lines = [
        "# Sandboxing that leaves the daemon working (see `goondan service print-unit --help`).",
        "NoNewPrivileges=yes",
        "LockPersonality=yes",
        "RestrictRealtime=yes",
        "RestrictSUIDSGID=yes",
        "SystemCallArchitectures=native",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
    ]
    if spec.user_unit:
        return [*lines, ""]
    lines += [
        "ProtectSystem=strict",
        "ProtectHome=read-only",
        "PrivateTmp=yes",
        "PrivateDevices=yes",
        "ProtectKernelTunables=yes",
        "ProtectKernelModules=yes",
        "ProtectKernelLogs=yes",
        "ProtectControlGroups=yes",
        "ProtectClock=yes",
        "ProtectHostname=yes",
        "RestrictNamespaces=yes",
    ]
    writable = [spec.state_root] if spec.state_root is not None else []
    writable += list(spec.writable)
    if writable:
        lines.append("ReadWritePaths=" + " ".join(quote_word(str(p)) for p in writable))
    return [*lines, ""]


def render_unit(spec: UnitSpec) -> str:
    header = [
        f"# {spec.name}.service: goondan swarm {spec.swarm}",
        "# Generated by `goondan service print-unit`. Install with:",
    ]
    if spec.user_unit:
        header += [
            f"#   F=~/.config/systemd/user/{spec.name}.service",
            "#   goondan service print-unit --user BUNDLE > $F",
            f"#   systemctl --user daemon-reload && systemctl --user enable --now {spec.name}",
        ]
    else:
        header += [
            f"#   F=/etc/systemd/system/{spec.name}.service",
            "#   goondan service print-unit BUNDLE | sudo tee $F",
            f"#   sudo systemctl daemon-reload && sudo systemctl enable --now {spec.name}",
        ]
    header.append("")
    target = "default.target" if spec.user_unit else "multi-user.target"
    body = _unit_section(spec) + _service_section(spec) + _sandbox_section(spec)
    return "\n".join([*header, *body, "[Install]", f"WantedBy={target}", ""])
