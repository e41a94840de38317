"""The eight resource kinds of a bundle as strict Structs (unknown fields are errors).

Field names follow Goondan's documents (camelCase on disk, snake_case in Python). Cross-resource
rules (refs exist, names unique, entry files inside the bundle) live in `bundles.validate`;
this module only says what shape each document has.
"""

from __future__ import annotations

import ipaddress
import re
from enum import StrEnum
from typing import Any, Literal

import msgspec

API_VERSION = "goondan.ai/v1"
BASE_PACKAGE = "@goondan/base"


class _Spec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    pass


class Kind(StrEnum):
    PACKAGE = "Package"
    MODEL = "Model"
    AGENT = "Agent"
    SWARM = "Swarm"
    TOOL = "Tool"
    EXTENSION = "Extension"
    CONNECTOR = "Connector"
    CONNECTION = "Connection"


# -- references --------------------------------------------------------------------------


class ObjectRef(_Spec):
    """`{kind, name, package?}`; the string form `Kind/name` is parsed into this."""

    kind: str
    name: str
    package: str | None = None
    api_version: str | None = None


class Selector(_Spec):
    kind: str | None = None
    name: str | None = None
    match_labels: dict[str, str] = msgspec.field(default_factory=dict)
    package: str | None = None


class RefItem(_Spec):
    """One entry of a list of references. Exactly one of `ref`, `selector`, or the inline
    `kind`+`name` form is set; `overrides` is deep-merged into every resource it selects."""

    ref: str | ObjectRef | None = None
    selector: Selector | None = None
    kind: str | None = None
    name: str | None = None
    package: str | None = None
    overrides: dict[str, Any] | None = None


RefLike = str | RefItem
"""What a YAML list of references accepts: `Tool/bash`, `{ref: ...}`, `{selector: ...}`,
or `{kind, name, package}`."""


class SecretRef(_Spec):
    ref: str
    """`Secret/<name>`: a file `<state_root>/secrets/<name>.json` (or .env-style)."""
    key: str


class ValueFrom(_Spec):
    env: str | None = None
    secret_ref: SecretRef | None = None


class ValueSource(_Spec):
    """Exactly one of `value`, `valueFrom.env`, `valueFrom.secretRef`."""

    value: str | None = None
    value_from: ValueFrom | None = None


# -- metadata and the resource envelope --------------------------------------------------


class Metadata(_Spec):
    name: str
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    annotations: dict[str, str] = msgspec.field(default_factory=dict)


# -- Package -----------------------------------------------------------------------------


class PackageRequirement(_Spec):
    """The long form of a dependency, for a distribution whose name is not the usual one."""

    version: str | None = None
    """PEP 440 specifiers, e.g. `>=1.2,<2` (absent: any version)."""
    distribution: str | None = None
    """The Python distribution that provides the package (default: `@acme/github` is
    `acme-github`): what `pip install` is told when it is missing."""


PackageDependencies = dict[str, str | PackageRequirement | None]
"""`{"@acme/github": ">=1.2,<2"}`: package name to a PEP 440 range (null: any version)."""


class PackageSpec(_Spec):
    version: str | None = None
    description: str | None = None
    dependencies: PackageDependencies = msgspec.field(default_factory=dict)
    """The installed packages this bundle (or package) references; `@goondan/base` is always
    available (listing it checks its version)."""


# -- Model -------------------------------------------------------------------------------


class Pricing(_Spec):
    """US dollars per million tokens: what a call costs (budgets, `goondan status`)."""

    input_per_m_tok: float
    output_per_m_tok: float
    cached_input_per_m_tok: float | None = None
    """Input tokens read from the provider's prompt cache (default: the input price)."""


class RateLimit(_Spec):
    """One bucket for every agent process that uses this Model, kept by the orchestrator."""

    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None


class Recording(_Spec):
    """`Model.spec.recording`: one mode at a time, so record-and-replay is not expressible."""

    mode: Literal["record", "replay"]
    dir: str
    """Relative to the bundle's directory."""


class ModelSpec(_Spec):
    provider: str
    """`openai`, `anthropic` or `scripted`."""
    model: str
    endpoint: str | None = None
    api_key: ValueSource | None = None
    options: dict[str, Any] = msgspec.field(default_factory=dict)
    capabilities: dict[str, bool] = msgspec.field(default_factory=dict)
    pricing: Pricing | None = None
    rate_limit: RateLimit | None = None
    fallback: list[str | ObjectRef] = msgspec.field(default_factory=list)
    """Models a step is retried on, in order, when this one is rate limited, overloaded,
    fails with a 5xx or times out."""
    recording: Recording | None = None
    """Record this Model's responses to a directory, or replay them from it instead of calling
    the provider (docs/guides/evals.md)."""
    replay: str | None = None
    """`replay: DIR` is `recording: {mode: replay, dir: DIR}` in one line, for debugging one
    conversation from `goondan run`; not together with `recording`."""

    @property
    def taping(self) -> Recording | None:
        """The recording setting, from `recording` or the `replay` shorthand."""
        if self.recording is not None or not self.replay:
            return self.recording
        return Recording(mode="replay", dir=self.replay)


class ScriptToolCall(_Spec):
    name: str
    args: dict[str, Any] = msgspec.field(default_factory=dict)
    id: str | None = None


class ScriptRule(_Spec):
    """One rule of a scripted model: the first rule whose `match` fits answers the step.

    `match` is a regex searched in the latest user input (all rules match when absent);
    `afterTool` matches only when the previous step ran that tool; `reply` may use
    `{input}`, `{last_tool_result}` and `{last_tool_name}`; `toolCalls` are issued instead of
    (or before) the reply.
    """

    match: str | None = None
    after_tool: str | None = None
    reply: str | None = None
    tool_calls: list[ScriptToolCall] = msgspec.field(default_factory=list)
    delay_ms: int = 0
    stream_chunk_chars: int | None = None
    """Overrides the model's `streamChunkChars` for this rule's reply."""
    stream_delay_ms: int | None = None
    """Overrides the model's `streamDelayMs` for this rule's reply."""


class ScriptedOptions(_Spec):
    """`Model.spec.options` when `provider: scripted`."""

    script: list[ScriptRule] = msgspec.field(default_factory=list)
    script_file: str | None = None
    default_reply: str = "{input}"
    stream_chunk_chars: int = 0
    """When the turn is streamed: the reply goes out in pieces of this many characters (0: in
    one piece)."""
    stream_delay_ms: int = 0
    """When the turn is streamed: the wait between two pieces."""


# -- Agent -------------------------------------------------------------------------------


class ModelConfig(_Spec):
    model_ref: str | ObjectRef
    params: dict[str, Any] = msgspec.field(default_factory=dict)


class Prompt(_Spec):
    system: str | None = None
    system_ref: str | None = None


class Budget(_Spec):
    """Limits per UTC day, counted by the orchestrator across instances and restarts."""

    turns_per_day: int | None = None
    tokens_per_day: int | None = None
    cost_usd_per_day: float | None = None
    """Needs `pricing` on every Model the budget's agents use."""


class AgentPolicy(_Spec):
    budget: Budget | None = None


class AgentLimits(_Spec):
    """What one agent process and the processes its tools start may use (`bundles.limits`,
    applied by `agent_process.limits`); unset fields are not limited."""

    memory: int | str | None = None
    """Bytes, or a size such as "512Mi" or "2G": each process's private writable memory
    (RLIMIT_DATA); the agent's cgroup memory.max where its cgroup is delegated."""
    cpu_seconds: int | None = None
    """CPU time of each process over its life (RLIMIT_CPU): past it the process is killed."""
    open_files: int | None = None
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    processes: int | None = None
    """Processes and threads (RLIMIT_NPROC counts all of the user's, not the agent's alone,
    and does not bind root); the agent cgroup's pids.max where delegated."""
    cpus: float | None = None
    """CPUs' worth of time per period (cgroup cpu.max), only where the cgroup is delegated."""


class AgentSpec(_Spec):
    model_config: ModelConfig
    description: str | None = None
    """What the agent does, for clients that discover it (the `api` connector's A2A card and
    MCP tool)."""
    prompt: Prompt = msgspec.field(default_factory=Prompt)
    tools: list[RefLike] = msgspec.field(default_factory=list)
    extensions: list[RefLike] = msgspec.field(default_factory=list)
    required_tools: list[str] = msgspec.field(default_factory=list)
    policy: AgentPolicy = msgspec.field(default_factory=AgentPolicy)
    limits: AgentLimits = msgspec.field(default_factory=AgentLimits)


# -- Swarm -------------------------------------------------------------------------------


class ShutdownPolicy(_Spec):
    grace_period_seconds: float = 30.0


class RestartPolicy(_Spec):
    """Crash-loop settings: crashes 1..immediate restart at once, then exponential backoff."""

    immediate_restarts: int = 5
    backoff_base_seconds: float = 1.0
    backoff_max_seconds: float = 300.0


DEFAULT_IDLE_TIMEOUT_SECONDS = 600.0


class LifecyclePolicy(_Spec):
    idle_timeout_seconds: float | None = DEFAULT_IDLE_TIMEOUT_SECONDS
    """Deactivate an agent instance idle this long: its process exits, its state stays on
    disk, and its next event starts it again (a spawn, `bench_spawn`). `null` keeps idle
    instances live until the live bound (`maxLiveInstances`) makes room."""
    reconcile_interval_seconds: float = 5.0
    request_timeout_ms: int = 60_000
    deferred_ttl_seconds: float = 3600.0
    """How long a deferred (client-side) tool call waits for its client (ARCHITECTURE.md §10)."""


class SpawnPolicy(_Spec):
    allowed_roots: list[str] = msgspec.field(default_factory=list)
    """Absolute directories `agents__spawn` may make an instance's workdir, besides the
    spawning instance's own workdir (which is always allowed)."""


class IngressPolicy(_Spec):
    journal: Literal["sqlite", "off"] | bool = "sqlite"
    """`sqlite`: every accepted event is on disk before its sender hears it was accepted, and
    is delivered again after a crash. `off` (YAML also reads an unquoted `off` as false):
    accepted events live in memory only."""


class ClusterPolicy(_Spec):
    """Cluster mode only (`goondan run --cluster`, ARCHITECTURE.md §15); ignored on one machine."""

    partitions: int = 64
    """Instances are spread over this many partitions (each owned by one node at a time);
    fixed for the life of the swarm's streams."""
    lease_ttl_seconds: float = 3.0
    """A node that has not renewed its leases for this long loses them to the others."""
    replicas: int = 3
    """JetStream replicas of the swarm's streams and buckets (1 for a single NATS server)."""
    dedupe_window_seconds: float = 3600.0
    """How long an idempotency key maps a retry to its first event (`Nats-Msg-Id`)."""


class ToolsPolicy(_Spec):
    default_timeout_ms: int = 300_000
    """The timeout of an export that sets no `timeoutMs`: a hanging tool ends its call with
    E_TOOL_TIMEOUT instead of blocking its instance forever."""


class SwarmPolicy(_Spec):
    max_steps_per_turn: int = 32
    max_frame_bytes: int = 16 << 20
    """The largest frame between an agent and the daemon (a reply, a tool result in an event):
    bigger ones are refused before they are read; an agent's own oversize reply becomes a
    coded error (E_FRAME_TOO_LARGE)."""
    max_live_instances: int | None = msgspec.field(default=None)
    """Live agent processes at most; the least recently used idle one makes room. Default:
    the machine's memory / 16 MiB (at least 16)."""
    spawn: SpawnPolicy = msgspec.field(default_factory=SpawnPolicy)
    ingress: IngressPolicy = msgspec.field(default_factory=IngressPolicy)
    cluster: ClusterPolicy = msgspec.field(default_factory=ClusterPolicy)
    tools: ToolsPolicy = msgspec.field(default_factory=ToolsPolicy)
    shutdown: ShutdownPolicy = msgspec.field(default_factory=ShutdownPolicy)
    restart: RestartPolicy = msgspec.field(default_factory=RestartPolicy)
    lifecycle: LifecyclePolicy = msgspec.field(default_factory=LifecyclePolicy)
    budget: Budget | None = None
    """The whole swarm's daily limits (every agent together)."""


class MetricsEndpoint(_Spec):
    """Where the daemon serves Prometheus metrics (`GET /metrics`, ARCHITECTURE.md §13)."""

    port: int
    """0 picks a free port (the daemon logs `metrics_listening` with the one it got)."""
    host: str = "127.0.0.1"


class LogsPolicy(_Spec):
    """The daemon's log files (`orchestrator.log` and each agent's, ARCHITECTURE.md §12)."""

    max_file_bytes: int = 64 << 20
    """A log file reaching this size is renamed `<name>.1` (`.1` to `.2`, ...) and a new one
    starts; 0 never rotates."""
    keep_files: int = 4
    """Rotated files kept per log; older ones are removed."""


class Observability(_Spec):
    metrics: MetricsEndpoint | None = None
    """Off by default."""
    logs: LogsPolicy = msgspec.field(default_factory=LogsPolicy)


class SwarmSpec(_Spec):
    entry_agent: str | ObjectRef
    agents: list[RefLike]
    instance_key: str | None = None
    policy: SwarmPolicy = msgspec.field(default_factory=SwarmPolicy)
    observability: Observability = msgspec.field(default_factory=Observability)


# -- Tool --------------------------------------------------------------------------------


class DeferredSpec(_Spec):
    """An export with no handler that always runs on the client (ARCHITECTURE.md §10)."""

    method: str
    message: str | None = None
    ttl_seconds: float | None = None


class ApprovalSpec(_Spec):
    """`approval: {when, message, ttlSeconds}` on an export: a person must approve a call
    before it runs (ARCHITECTURE.md §10). `when` is a JSON Schema over the call's arguments:
    only calls whose arguments match it need approval (absent: every call)."""

    when: dict[str, Any] | None = None
    message: str | None = None
    ttl_seconds: float | None = None
    """How long the call waits for the decision (default: the Swarm's deferredTtlSeconds)."""


class ToolExport(_Spec):
    name: str
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    timeout_ms: int | None = None
    result_schema: dict[str, Any] | None = None
    deferred: DeferredSpec | None = None
    approval: Literal["required"] | ApprovalSpec | None = None
    """`required` or `{when, message, ttlSeconds}`: the call waits for a person's approval
    (`goondan calls approve|deny`, the webhook's /rpc, chat buttons) before it runs."""
    idempotent: bool = False
    """Running it twice has the effect of running it once: a call cut by a crash is run again
    when its turn resumes. False (the default): the cut call gets E_AGENT_CRASHED instead."""


class McpServer(_Spec):
    """stdio (`command`, `args`, `env`) or streamable HTTP (`url`, `headers`)."""

    command: str | None = None
    args: list[str] = msgspec.field(default_factory=list)
    env: dict[str, str | ValueSource] = msgspec.field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str | ValueSource] = msgspec.field(default_factory=dict)
    timeout_ms: int = 30_000
    required: bool = True
    """A server that cannot start fails the agent's start; `false` starts without its tools."""


SandboxMode = Literal["auto", "bubblewrap", "landlock", "off"]
_HOST_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_HOST_PORT = re.compile(r"^(?:\[(?P<v6>[^\]]*)\]|(?P<host>[^:\[\]]+))(?::(?P<port>\d{1,5}))?$")


def _is_address(text: str, version: int) -> bool:
    try:
        return ipaddress.ip_address(text).version == version
    except ValueError:
        return False


def network_entry_problem(entry: str) -> str | None:
    """Why `entry` is no `network.allow` entry: a host name, `*.domain` (its subdomains), an
    IPv4 or `[IPv6]` address, each with an optional `:port`. The proxy of the base tools
    (`_netproxy.parse_rule`) reads the same grammar at run time."""
    bare_v6 = entry.count(":") > 1 and not entry.startswith("[") and _is_address(entry, 6)
    match = _HOST_PORT.match(entry.lower().rstrip("."))
    if bare_v6:
        return None
    if match is None or entry != entry.strip():
        return "write a host name, *.domain or IP address ([IPv6]), with an optional :port"
    if match["port"] is not None and not 1 <= int(match["port"]) <= 65535:
        return f"port {match['port']} is not from 1 to 65535"
    if match["v6"] is not None:
        return None if _is_address(match["v6"], 6) else f"[{match['v6']}] is no IPv6 address"
    host = match["host"]
    if _is_address(host, 4):
        return None
    name = host.removeprefix("*.")
    labels = name.split(".")
    if len(name) > 253 or not all(map(_HOST_LABEL.match, labels)) or labels[-1].isdigit():
        return f"{host!r} is not a host name (letters, digits, '-' and dots; *.domain)"
    if host.startswith("*.") and len(labels) < 2:
        return f"{host!r} would open a whole top-level domain: name one below it"
    return None


class SandboxNetwork(_Spec):
    """`network: {allow: [...]}`: no network of its own, but a proxy outside the sandbox that
    reaches these hosts (HTTP and HTTPS through HTTP_PROXY/HTTPS_PROXY); bubblewrap only."""

    allow: list[str]
    """`api.github.com`, `*.pypi.org` (subdomains), `10.0.0.5:8080`; without a port 80 and
    443. A name that resolves to a private or loopback address is refused: list the address."""

    def __post_init__(self) -> None:
        for i, entry in enumerate(self.allow):
            problem = network_entry_problem(entry)
            if problem is not None:
                raise ValueError(f"network.allow[{i}] {entry!r}: {problem}")


class ToolSandbox(_Spec):
    """Where the processes a tool starts run (`bash`, ripgrep): see `Tool.spec.sandbox`."""

    mode: SandboxMode | bool = "auto"
    """auto = bubblewrap, else Landlock (Linux 5.13+), else refused with E_SANDBOX_UNAVAILABLE;
    off = none (logged at every agent start). YAML reads an unquoted `off` as false."""
    network: bool | SandboxNetwork = True
    """false: the sandbox has no network but its own loopback; `{allow: [hosts]}`: only the
    hosts listed, through a proxy (HTTP/HTTPS clients that honour HTTP(S)_PROXY)."""

    def __post_init__(self) -> None:
        if self.mode == "landlock" and isinstance(self.network, SandboxNetwork):
            raise ValueError(
                "network.allow needs bubblewrap (mode auto or bubblewrap): Landlock cannot "
                "tell one host from another"
            )


class ToolSpec(_Spec):
    entry: str | None = None
    """A Python file (relative to the bundle) or a dotted module exporting `handlers`."""
    error_message_limit: int = 1000
    result_limit: int = 100_000
    """Characters of a result's JSON the model gets at most; longer ones are cut with a
    marker saying how much there was."""
    exports: list[ToolExport] = msgspec.field(default_factory=list)
    mcp: McpServer | None = None
    config: dict[str, Any] = msgspec.field(default_factory=dict)
    """Tool settings handed to handlers as `ctx.config` (roots, caps, allow-lists)."""
    sandbox: ToolSandbox | SandboxMode | bool = "auto"
    """A mode alone (`sandbox: off`) or `{mode, network}`; handed to handlers as
    `ctx.config["sandbox"]` with the paths the sandbox hides."""


# -- Extension ---------------------------------------------------------------------------


class ExtensionSpec(_Spec):
    entry: str | None = None
    config: dict[str, Any] = msgspec.field(default_factory=dict)
    mcp: McpServer | None = None


# -- Connector and Connection ------------------------------------------------------------


class ConnectorEvent(_Spec):
    name: str
    properties: dict[str, Any] = msgspec.field(default_factory=dict)


class ConnectorSpec(_Spec):
    entry: str
    events: list[ConnectorEvent] = msgspec.field(default_factory=list)
    config: dict[str, Any] = msgspec.field(default_factory=dict)


class IngressMatch(_Spec):
    event: str | None = None
    properties: dict[str, Any] = msgspec.field(default_factory=dict)


class IngressRoute(_Spec):
    agent_ref: str | ObjectRef | None = None
    instance_key: str | None = None
    instance_key_property: str | None = None
    instance_key_prefix: str | None = None
    reply: bool = True
    """Send the agent's reply back through the connector (e.g. in the HTTP response)."""


class IngressRule(_Spec):
    match: IngressMatch = msgspec.field(default_factory=IngressMatch)
    route: IngressRoute = msgspec.field(default_factory=IngressRoute)


class Ingress(_Spec):
    rules: list[IngressRule] = msgspec.field(default_factory=list)
    new_instances_per_minute: float | None = None
    """At most this many events a minute (bursts up to the same number) may start an instance
    that does not exist yet; more get E_AGENT_CAPACITY. None: no limit."""


class ConnectionSpec(_Spec):
    connector_ref: str | ObjectRef
    swarm_ref: str | ObjectRef | None = None
    config: dict[str, str | bool | int | float | ValueSource | list[str | ValueSource]] = (
        msgspec.field(default_factory=dict)
    )
    """Strings, ValueSources, or lists of them (e.g. the api connector's bearer `tokens`);
    plain YAML numbers and booleans too (`port: 8790`, `sharedInstances: true`), as they are."""
    secrets: dict[str, ValueSource] = msgspec.field(default_factory=dict)
    ingress: Ingress = msgspec.field(default_factory=Ingress)


SPEC_TYPES: dict[Kind, type[_Spec]] = {
    Kind.PACKAGE: PackageSpec,
    Kind.MODEL: ModelSpec,
    Kind.AGENT: AgentSpec,
    Kind.SWARM: SwarmSpec,
    Kind.TOOL: ToolSpec,
    Kind.EXTENSION: ExtensionSpec,
    Kind.CONNECTOR: ConnectorSpec,
    Kind.CONNECTION: ConnectionSpec,
}
