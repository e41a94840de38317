"""Observe: what the operator reads: logs, metrics, conversations.

What this room may import: docs/ARCHITECTURE.md §1 and the import contracts in pyproject.toml.
"""
