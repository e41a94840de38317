"""Ingress: events from outside (CLI, connectors), journaled first, then handed to routing.

What this room may import: docs/ARCHITECTURE.md §1 and the import contracts in pyproject.toml.
"""
