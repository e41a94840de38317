"""A node whose NATS server stops answering (cut off, or paused: its TCP connection stays open)
moves to another server of the cluster within a few lease TTLs and serves again while that
server is still gone. With nats-py's default pings (every 120 s, two unanswered) it stayed on
the dead server for minutes, its partitions lapsed. Its own module: it pauses a server of the
module's cluster."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from tests.cluster.harness import StartDaemon, swarm_of, unique_swarm_bundle
from tests.cluster.natsd import NatsCluster, with_user


async def test_a_node_leaves_a_server_that_stopped_answering(
    start_daemon: StartDaemon, nats_cluster: NatsCluster, tmp_path: Path
) -> None:
    bundle = unique_swarm_bundle(tmp_path)
    first = nats_cluster.servers[0]
    assert first.proc is not None
    async with asyncio.timeout(60):
        # given one server only, as a node behind a load balancer: it learns the others from it
        node = await start_daemon(bundle, swarm=swarm_of(bundle), state_root=tmp_path / "n1",
                                  args=("--cluster", with_user(first.plain_url, "n1"),
                                        "--node", "n1"))  # fmt: skip
        await node.wait_for("cluster_settled", nodes=1)
        before = await node.send("hi", key="a")
        assert before.ok, before.error
    mark = node.mark()
    first.proc.send_signal(signal.SIGSTOP)  # answers nothing, refuses nothing
    try:
        async with asyncio.timeout(45):  # before the fix: until the server is continued
            await node.wait_for("nats_reconnected", mark)
            after = await node.send("again", key="a")
        assert after.ok, after.error
        assert after.result["input"] == "caller: again"
    finally:
        first.proc.send_signal(signal.SIGCONT)
    async with asyncio.timeout(30):
        await nats_cluster.wait_ready()
