"""Cluster mode: one swarm across machines on NATS JetStream (ARCHITECTURE.md §15).

Only a node started with `goondan run --cluster ...` imports the modules here that import
nats-py (`link`, `leases`, `ingress`, `history`, `state`, `node`); `names` and `options` are
pure. Single-machine mode never imports this package's NATS modules (a test checks it).
"""
