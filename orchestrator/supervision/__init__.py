"""Supervision: the process table and everything that changes it (spawn, watch, restart, drain,
kill, hibernate).

What this room may import: docs/ARCHITECTURE.md §1 and the import contracts in pyproject.toml.
"""
