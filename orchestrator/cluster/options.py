"""What `goondan run --cluster URLS --node NAME [--nats-user USER | --nats-creds FILE]
[--insecure-nats]` asks for, checked; pure.

Credentials never reach a log line or argv a node re-executes: a URL's `user:password@` is
replaced by `***@` in everything `redacted()` returns, and a creds file is passed by path.

A node needs credentials (a user or token in the URLs, or a creds file): a NATS server without
authorization lets any client read every conversation, answer calls and register as a node
(docs/cluster.md). `--insecure-nats` is the explicit way to run without,
and the node says so in its log at every start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from bundles.kinds import ClusterPolicy
from orchestrator.cluster.names import NODE_NAME
from protocol.errors import ErrorCode

SCHEMES = ("nats", "tls")
PASSWORD_ENV = "GOONDAN_NATS_PASSWORD"
"""The password of `--nats-user`: an environment variable (a systemd `EnvironmentFile=`), not
an argument, which `ps` shows; the daemon removes it from its environment once read."""


class ClusterConfigError(Exception):
    def __init__(
        self, message: str, suggestion: str, code: ErrorCode = ErrorCode.E_CLUSTER_CONFIG
    ) -> None:
        super().__init__(f"{code}: {message} ({suggestion})")
        self.code = code
        self.message = message
        self.suggestion = suggestion


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    servers: tuple[str, ...]
    node: str
    creds: Path | None = None
    policy: ClusterPolicy = field(default_factory=ClusterPolicy)
    insecure: bool = False
    """`--insecure-nats`: connect without credentials (logged at every start)."""
    user: tuple[str, str] | None = field(default=None, repr=False)
    """`--nats-user` and its password (from PASSWORD_ENV, never argv)."""

    @property
    def tls(self) -> bool:
        return any(url.startswith("tls://") for url in self.servers)

    @property
    def login(self) -> tuple[str, str | None] | None:
        """(user, password) of `--nats-user`, else of the first URL that names a user (password
        None: a token)."""
        if self.user is not None:
            return self.user
        for url in self.servers:
            parts = urlsplit(url)
            if parts.username:
                return unquote(parts.username), _unquoted(parts.password)
        return None

    @property
    def has_credentials(self) -> bool:
        return self.creds is not None or self.login is not None

    def redacted(self) -> list[str]:
        return [redact_url(url) for url in self.servers]


def redact_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://***@{host}{port}"


def _unquoted(text: str | None) -> str | None:
    return unquote(text) if text is not None else None


def _user(user: str | None, password: str | None) -> tuple[str, str] | None:
    if user is None and password is None:
        return None
    if not user or not password:
        given, missing = ("--nats-user", PASSWORD_ENV) if user else (PASSWORD_ENV, "--nats-user")
        raise ClusterConfigError(f"{given} is given without {missing}",
                                 f"give both, or neither (the password only in {PASSWORD_ENV}, "
                                 "which no agent process inherits)")  # fmt: skip
    return user, password


def parse_servers(text: str) -> tuple[str, ...]:
    """`nats://h:p[,tls://h:p...]` -> the URLs; ClusterConfigError naming the bad one."""
    urls = tuple(u.strip() for u in text.split(",") if u.strip())
    if not urls:
        raise ClusterConfigError("--cluster names no server", "give nats://HOST:PORT[,...]")
    for url in urls:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError:
            raise ClusterConfigError(f"{redact_url(url)} is not a URL",
                                     "write nats://HOST:PORT") from None  # fmt: skip
        if parts.scheme not in SCHEMES or not parts.hostname:
            raise ClusterConfigError(
                f"{redact_url(url)} is not a NATS server URL",
                "write nats://HOST:PORT, or tls://HOST:PORT for TLS",
            )
        if port is None:
            raise ClusterConfigError(f"{redact_url(url)} has no port", "add :4222 (or yours)")
    return urls


def options(
    cluster: str,
    node: str | None,
    creds: str | None,
    policy: ClusterPolicy,
    insecure: bool = False,
    user: str | None = None,
    password: str | None = None,
) -> ClusterOptions:
    servers = parse_servers(cluster)
    if not node:
        raise ClusterConfigError("--cluster needs --node NAME", "name this node, e.g. --node n1")
    if not NODE_NAME.match(node):
        raise ClusterConfigError(
            f"node name {node!r} is not allowed",
            "use letters, digits, '_' and '-' (at most 64, starting with a letter or digit)",
        )
    path = None
    if creds is not None:
        path = Path(creds).expanduser()
        if not path.is_file():
            raise ClusterConfigError(f"--nats-creds {path} is not a readable file",
                                     "give the path of a NATS .creds file")  # fmt: skip
    opts = ClusterOptions(servers=servers, node=node, creds=path, policy=policy,
                          insecure=insecure, user=_user(user, password))  # fmt: skip
    if not opts.has_credentials and not insecure:
        raise ClusterConfigError(
            "--cluster has no NATS credentials: any client of that server could read every "
            "conversation, answer calls and pose as a node",
            f"give this node's NATS user: --nats-user USER with {PASSWORD_ENV}, "
            "nats://USER:PASSWORD@HOST:PORT or --nats-creds FILE; --insecure-nats runs without "
            "(docs/cluster.md)",
            ErrorCode.E_CLUSTER_INSECURE,
        )
    return opts
