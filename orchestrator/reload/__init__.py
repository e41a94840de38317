"""Reload: a bundle edit reaching a running daemon (SIGHUP, `Reload`, `run --watch`).

What this room may import: docs/ARCHITECTURE.md §1 and the import contracts in pyproject.toml.
"""
