"""Calls: the daemon's answers to `call` frames (the `agents` tool, deferred calls and their
answers, model permits, budgets).

What this room may import: docs/ARCHITECTURE.md §1 and the import contracts in pyproject.toml.
"""
