"""The NATS server authorization a swarm's nodes need, one user per node
(docs/cluster.md); pure, printed by `goondan cluster nats-config` and used by the cluster tests.

A node publishes the subjects every node shares (ingress, history, replies, the bucket keys of
leases, replies, calls and the swarm's state, the JetStream API calls it makes) and, of what
names a node, only its own: requests to other nodes under its own name as the last token
(`node.<to>.<what>.<node>`, see `names.py`), its record in the `nodes` bucket
(`$KV.<bucket>.<node>`, the only one-token key of any bucket). It subscribes to its own
requests and inboxes (`_INBOX.<node>`, `link.py`) and replies to the requests it was sent
(`allow_responses`). The swarm and bucket are whole tokens (`*`), so one config serves every
swarm on the server.
"""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.cluster.names import token

SHARED_PUBLISH = (
    "goondan.*.in.>", "goondan.*.h.>", "goondan.*.reply.*",
    "$KV.*.p.*", "$KV.*.r.*", "$KV.*.*.*.*", "$KV.*.swarm.meta", "$KV.*.drain.*",
    "$JS.API.INFO", "$JS.API.STREAM.INFO.*", "$JS.API.STREAM.CREATE.*", "$JS.API.STREAM.DELETE.*",
    "$JS.API.STREAM.PURGE.*", "$JS.API.STREAM.MSG.GET.*", "$JS.API.DIRECT.GET.>",
    "$JS.API.CONSUMER.CREATE.>", "$JS.API.CONSUMER.DURABLE.CREATE.>", "$JS.API.CONSUMER.INFO.>",
    "$JS.API.CONSUMER.MSG.NEXT.>", "$JS.API.CONSUMER.DELETE.>", "$JS.ACK.>", "$JS.FC.>",
)  # fmt: skip
"""leases `p.<n>`, replies `r.<id>`, calls `<agent>.<key>.<id>`, state `swarm.meta` and
`drain.<node>`; a record under another shape in the `nodes` bucket does not count (`leases.py`).
A stream's delete is for the `nodes` or `leases` bucket stuck without a leader
(`stuck_bucket.py`): the subject cannot name part of a token, and a node may already purge every
stream."""


def node_publish(node: str) -> list[str]:
    me = token(node)
    return [*SHARED_PUBLISH, f"goondan.*.node.*.*.{me}", f"$KV.*.{me}"]


def node_subscribe(node: str) -> list[str]:
    me = token(node)
    return [f"_INBOX.{me}.>", f"goondan.*.node.{me}.>", "goondan.*.reply.*"]


def _strings(subjects: Iterable[str]) -> str:
    return "[" + ", ".join(f'"{s}"' for s in subjects) + "]"


def node_user(node: str, password: str) -> str:
    """One entry of `authorization { users = [...] }` for node `node`."""
    return (
        f'{{user: "{node}", password: "{password}", permissions: {{\n'
        f"      publish: {{allow: {_strings(node_publish(node))}}},\n"
        f"      subscribe: {{allow: {_strings(node_subscribe(node))}}},\n"
        "      allow_responses: true}}"
    )


def authorization(nodes: dict[str, str], admin: tuple[str, str] | None = None) -> str:
    """A nats-server `authorization` block: a user per node (name -> password) and, when given,
    the operator's own user with every permission."""
    users = [f'{{user: "{admin[0]}", password: "{admin[1]}"}}'] if admin is not None else []
    users += [node_user(node, password) for node, password in nodes.items()]
    return "authorization {\n  users = [\n    " + ",\n    ".join(users) + "\n  ]\n}\n"
