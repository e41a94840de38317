"""Routing: every frame between children goes through the agents ROUTER; mailboxes and the
open-request book.

What this room may import: docs/ARCHITECTURE.md §1 and the import contracts in pyproject.toml.
"""
