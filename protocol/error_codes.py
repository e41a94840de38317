"""Every error code goondan reports, and the one exception the codec raises, on the standard
library alone: `goondan send` reports them without importing msgspec (protocol.errors adds the
wire's ErrorInfo and re-exports both)."""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    """Every coded error goondan reports: config, tool, agent, extension, model, wire."""

    # config plane (bundles/)
    E_CONFIG_PARSE_ERROR = "E_CONFIG_PARSE_ERROR"
    E_CONFIG_ENTRY_CHECK = "E_CONFIG_ENTRY_CHECK"
    E_CONFIG_UNSUPPORTED_API_VERSION = "E_CONFIG_UNSUPPORTED_API_VERSION"
    E_CONFIG_UNKNOWN_KIND = "E_CONFIG_UNKNOWN_KIND"
    E_CONFIG_INVALID_NAME = "E_CONFIG_INVALID_NAME"
    E_CONFIG_DUPLICATE_NAME = "E_CONFIG_DUPLICATE_NAME"
    E_CONFIG_INVALID_REF = "E_CONFIG_INVALID_REF"
    E_CONFIG_REF_NOT_FOUND = "E_CONFIG_REF_NOT_FOUND"
    E_CONFIG_SCHEMA_INVALID = "E_CONFIG_SCHEMA_INVALID"
    E_CONFIG_ENTRY_NOT_FOUND = "E_CONFIG_ENTRY_NOT_FOUND"
    E_CONFIG_FILE_TOO_LARGE = "E_CONFIG_FILE_TOO_LARGE"
    E_CONFIG_TOO_MANY_DOCUMENTS = "E_CONFIG_TOO_MANY_DOCUMENTS"
    E_CONFIG_VALUE_SOURCE = "E_CONFIG_VALUE_SOURCE"
    E_CONFIG_PACKAGE_DOC_POSITION = "E_CONFIG_PACKAGE_DOC_POSITION"
    E_CONFIG_NOT_FOUND = "E_CONFIG_NOT_FOUND"
    E_CONFIG_PATH_ESCAPE = "E_CONFIG_PATH_ESCAPE"
    E_CONFIG_NO_SWARM = "E_CONFIG_NO_SWARM"

    # packages: Python distributions with a goondan.packages entry point (bundles/packages/)
    E_PACKAGE_NOT_INSTALLED = "E_PACKAGE_NOT_INSTALLED"
    """A package the bundle (or a package it uses) depends on is not installed here."""
    E_PACKAGE_VERSION = "E_PACKAGE_VERSION"
    """The installed version of a package is outside the range its dependent asks for."""
    E_PACKAGE_NOT_DECLARED = "E_PACKAGE_NOT_DECLARED"
    """A reference names a package its bundle (or package) does not list in
    `spec.dependencies`."""
    E_PACKAGE_EDIT = "E_PACKAGE_EDIT"
    """`goondan package add` cannot edit the bundle's Package document safely (no Package
    document, a flow `spec`, tabs, anchors): nothing was written; the message names the fix."""
    E_PACKAGE_INSTALL = "E_PACKAGE_INSTALL"
    """`goondan package add`: the installer (uv or pip) failed, or what it installed provides
    no goondan package."""
    E_PACKAGE_INVALID = "E_PACKAGE_INVALID"
    """An installed package cannot be used: its entry point names no package directory, it
    has no goondan.yaml, its Package document has another name, two distributions claim it."""
    E_LOCK_MISSING = "E_LOCK_MISSING"
    """`--frozen` with no goondan.lock beside the bundle (`goondan package lock` writes it)."""
    E_LOCK_INVALID = "E_LOCK_INVALID"
    """goondan.lock cannot be read: not TOML, a wrong type, too large."""
    E_LOCK_STALE = "E_LOCK_STALE"
    """`--frozen`: an installed package differs from goondan.lock (version, distribution, its
    files' hash), or one is used that the lock does not name, or the reverse."""

    # evals: `goondan eval FILE` (orchestrator/evals/)
    E_EVAL_INVALID = "E_EVAL_INVALID"
    """An eval file is not valid: bad YAML, an unknown field or evaluator, a wrong type; each
    error names its line."""
    E_EVAL_JUDGE = "E_EVAL_JUDGE"
    """A case's `judge` could not score the reply: an unknown Model, a model error, an answer
    that is not `{"pass": bool, "reason": str}`. The case fails; it is never a pass."""
    E_EVAL_RUN_NOT_FOUND = "E_EVAL_RUN_NOT_FOUND"
    """Studio was asked for an eval run that is not kept under the state root's `evals/` (an
    id of another shape, a run pruned by `--keep-runs`, or one whose cases ran in another
    daemon)."""

    # tools (agent_process/)
    E_TOOL = "E_TOOL"
    E_TOOL_NOT_IN_CATALOG = "E_TOOL_NOT_IN_CATALOG"
    E_TOOL_NOT_FOUND = "E_TOOL_NOT_FOUND"
    E_TOOL_INVALID_ARGS = "E_TOOL_INVALID_ARGS"
    E_TOOL_TIMEOUT = "E_TOOL_TIMEOUT"
    E_TOOL_LOAD = "E_TOOL_LOAD"
    E_TOOL_NAME_CONFLICT = "E_TOOL_NAME_CONFLICT"
    E_TOOL_INVALID_RESULT = "E_TOOL_INVALID_RESULT"
    E_TOOL_PATH_ESCAPE = "E_TOOL_PATH_ESCAPE"
    E_TOOL_DEFERRED_EXPIRED = "E_TOOL_DEFERRED_EXPIRED"
    E_TOOL_DEFERRED_REJECTED = "E_TOOL_DEFERRED_REJECTED"
    E_TOOL_PERMISSION_REQUIRED = "E_TOOL_PERMISSION_REQUIRED"
    E_TOOL_PERMISSION_DENIED = "E_TOOL_PERMISSION_DENIED"
    E_TOOL_USER_CANCELED = "E_TOOL_USER_CANCELED"
    E_TOOL_CLIENT_ERROR = "E_TOOL_CLIENT_ERROR"
    E_TOOL_MIDDLEWARE = "E_TOOL_MIDDLEWARE"
    E_TOOL_MCP = "E_TOOL_MCP"
    # built-in tools (bundles/base)
    E_TOOL_PATH_NOT_FOUND = "E_TOOL_PATH_NOT_FOUND"
    E_TOOL_PATH_EXISTS = "E_TOOL_PATH_EXISTS"
    E_TOOL_PATH_WRONG_TYPE = "E_TOOL_PATH_WRONG_TYPE"
    E_TOOL_FILE_TOO_LARGE = "E_TOOL_FILE_TOO_LARGE"
    E_TOOL_BINARY_FILE = "E_TOOL_BINARY_FILE"
    E_TOOL_HARD_LINK = "E_TOOL_HARD_LINK"
    E_TOOL_EDIT_NO_MATCH = "E_TOOL_EDIT_NO_MATCH"
    E_TOOL_EDIT_MULTIPLE_MATCHES = "E_TOOL_EDIT_MULTIPLE_MATCHES"
    E_TOOL_SSRF_BLOCKED = "E_TOOL_SSRF_BLOCKED"
    E_TOOL_URL_INVALID = "E_TOOL_URL_INVALID"
    E_TOOL_HTTP = "E_TOOL_HTTP"
    E_TOOL_QUERY_INVALID = "E_TOOL_QUERY_INVALID"
    E_TOOL_API = "E_TOOL_API"
    E_TOOL_RATE_LIMITED = "E_TOOL_RATE_LIMITED"
    E_SANDBOX_UNAVAILABLE = "E_SANDBOX_UNAVAILABLE"

    # agents and the orchestrator
    E_EVENT_NOT_FOUND = "E_EVENT_NOT_FOUND"
    E_INSTANCE_NOT_FOUND = "E_INSTANCE_NOT_FOUND"
    E_INSTANCE_EXISTS = "E_INSTANCE_EXISTS"
    """`goondan instance fork|replay --as KEY`: that instance has state or a live process."""
    E_TURN_NOT_FOUND = "E_TURN_NOT_FOUND"
    """`goondan instance fork --at TURN`: the instance has no such turn (1..N or a turn id)."""
    E_JOURNAL_CORRUPT = "E_JOURNAL_CORRUPT"
    E_JOURNAL_VERSION = "E_JOURNAL_VERSION"
    E_JOURNAL_WRITE = "E_JOURNAL_WRITE"
    E_JOURNAL_CORRUPT_ROW = "E_JOURNAL_CORRUPT_ROW"
    """A journal row that does not decode: moved to the journal's quarantine table, skipped."""
    E_JOURNAL_FAILED = "E_JOURNAL_FAILED"
    """The journal's writer thread failed (or did not stop in time): the daemon stops."""
    E_AGENT_NOT_FOUND = "E_AGENT_NOT_FOUND"
    E_AGENT_NOT_IN_SWARM = "E_AGENT_NOT_IN_SWARM"
    E_AGENT_TIMEOUT = "E_AGENT_TIMEOUT"
    E_AGENT_CRASHED = "E_AGENT_CRASHED"
    E_AGENT_CYCLE = "E_AGENT_CYCLE"
    E_AGENT_SELF_REQUEST = "E_AGENT_SELF_REQUEST"
    E_AGENT_START_FAILED = "E_AGENT_START_FAILED"
    E_AGENT_TURN_FAILED = "E_AGENT_TURN_FAILED"
    E_AGENT_MAX_STEPS = "E_AGENT_MAX_STEPS"
    E_AGENT_NOT_CONNECTED = "E_AGENT_NOT_CONNECTED"
    E_AGENT_SHUTTING_DOWN = "E_AGENT_SHUTTING_DOWN"
    E_AGENT_BACKOFF = "E_AGENT_BACKOFF"
    E_AGENT_UNDELIVERABLE = "E_AGENT_UNDELIVERABLE"
    E_AGENT_INVALID_INSTANCE_KEY = "E_AGENT_INVALID_INSTANCE_KEY"
    E_AGENT_SPAWN_DENIED = "E_AGENT_SPAWN_DENIED"
    E_AGENT_CAPACITY = "E_AGENT_CAPACITY"
    E_AGENT_BUDGET_EXCEEDED = "E_AGENT_BUDGET_EXCEEDED"
    E_USAGE_FILE_CORRUPT = "E_USAGE_FILE_CORRUPT"
    E_AGENT_LIMIT = "E_AGENT_LIMIT"

    # connectors and Connection ingress
    E_CONNECTOR_NO_ROUTE = "E_CONNECTOR_NO_ROUTE"
    E_CONNECTOR_START_FAILED = "E_CONNECTOR_START_FAILED"
    E_CONNECTOR_CLOSED = "E_CONNECTOR_CLOSED"
    E_CONNECTOR_UNSIGNED = "E_CONNECTOR_UNSIGNED"
    """An answer to a pending call (webhook `POST /rpc`) on a Connection without a
    signingSecret: anyone who reaches the port could answer or approve it."""

    # extensions
    E_EXT_LOAD = "E_EXT_LOAD"
    E_EXT_INIT = "E_EXT_INIT"
    E_EXT_REQUIRED_TOOLS_MISSING = "E_EXT_REQUIRED_TOOLS_MISSING"

    # model providers
    E_MODEL_AUTH = "E_MODEL_AUTH"
    E_MODEL_RATE_LIMIT = "E_MODEL_RATE_LIMIT"
    E_MODEL_TIMEOUT = "E_MODEL_TIMEOUT"
    E_MODEL_CONNECTION = "E_MODEL_CONNECTION"
    E_MODEL_BAD_REQUEST = "E_MODEL_BAD_REQUEST"
    E_MODEL_ERROR = "E_MODEL_ERROR"
    E_MODEL_SCRIPT = "E_MODEL_SCRIPT"
    E_REPLAY_MISSING = "E_REPLAY_MISSING"
    """A replayed Model got a request with no recording (a changed prompt, input or tool):
    never sent to the provider."""
    E_REPLAY_INVALID = "E_REPLAY_INVALID"
    """A recording file that is not one (garbage, too big, wrong types, a symlink)."""
    E_RECORD_FAILED = "E_RECORD_FAILED"
    """A recorded Model's response could not be written to its directory."""

    # wire, control plane and daemon
    E_PROTOCOL_DECODE = "E_PROTOCOL_DECODE"
    E_PROTOCOL_VERSION = "E_PROTOCOL_VERSION"
    E_ENDPOINT_TOO_LONG = "E_ENDPOINT_TOO_LONG"
    E_DAEMON_NOT_RUNNING = "E_DAEMON_NOT_RUNNING"
    E_DAEMON_ALREADY_RUNNING = "E_DAEMON_ALREADY_RUNNING"
    E_CONTROL_BAD_REQUEST = "E_CONTROL_BAD_REQUEST"
    E_CONTROL_TIMEOUT = "E_CONTROL_TIMEOUT"
    E_CONTROL_FORBIDDEN = "E_CONTROL_FORBIDDEN"
    E_FRAME_TOO_LARGE = "E_FRAME_TOO_LARGE"
    E_NOT_IMPLEMENTED = "E_NOT_IMPLEMENTED"
    E_CALL_NOT_FOUND = "E_CALL_NOT_FOUND"
    E_CALL_INVALID_ANSWER = "E_CALL_INVALID_ANSWER"
    E_CALL_NOT_APPROVAL = "E_CALL_NOT_APPROVAL"
    E_CALL_FORBIDDEN = "E_CALL_FORBIDDEN"
    """An answer from someone who may not give it: an approval from anyone but an approver (the
    CLI, Studio, a Connection's `approvers`), a client-side call answered through another
    Connection or instance than the one that received it."""
    E_METRICS_UNAVAILABLE = "E_METRICS_UNAVAILABLE"
    """The metrics endpoint cannot start (its port is taken, prometheus_client is missing)."""

    E_SERVICE_RUN_AS = "E_SERVICE_RUN_AS"
    """`goondan service print-unit` run as root without `--run-as`: its unit would run every
    agent (and every tool) as root."""

    # cluster mode (orchestrator/cluster/)
    E_CLUSTER_CONFIG = "E_CLUSTER_CONFIG"
    """A bad --cluster URL, node name or credentials file, or nats-py is not installed."""
    E_CLUSTER_INSECURE = "E_CLUSTER_INSECURE"
    """--cluster without NATS credentials (a user in the URL, --nats-creds) nor --insecure-nats."""
    E_CLUSTER_UNAVAILABLE = "E_CLUSTER_UNAVAILABLE"
    """NATS (or its JetStream) cannot be reached, or refused to create the swarm's streams."""
    E_CLUSTER_SERVER_VERSION = "E_CLUSTER_SERVER_VERSION"
    """The NATS server is older than the oldest release cluster mode supports."""
    E_CLUSTER_FENCED = "E_CLUSTER_FENCED"
    """A conversation append was refused: another node owns the instance now."""
    E_CLUSTER_NOT_OWNER = "E_CLUSTER_NOT_OWNER"
    """This node does not own the instance's partition (its lease lapsed or moved)."""
    E_CLUSTER_NODE_UNKNOWN = "E_CLUSTER_NODE_UNKNOWN"
    """`goondan cluster drain NODE` named no live node."""

    # studio (orchestrator/studio/)
    E_STUDIO_FORBIDDEN = "E_STUDIO_FORBIDDEN"
    """A request without the token, from a foreign Host or Origin (DNS rebinding, CSRF)."""
    E_STUDIO_READ_ONLY = "E_STUDIO_READ_ONLY"
    """An action on a Studio started without --allow-actions."""
    E_STUDIO_BAD_REQUEST = "E_STUDIO_BAD_REQUEST"


class ProtocolError(Exception):
    """Raised for any frame or endpoint that breaks the wire contract.

    The codec raises nothing else: callers catch this one type, log it with the sender,
    and drop the frame.
    """

    def __init__(self, message: str, code: ErrorCode = ErrorCode.E_PROTOCOL_DECODE) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
