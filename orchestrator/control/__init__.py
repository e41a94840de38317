"""Control: the control socket (`control.sock`), who may use it, and the CLI's side of it.

What this room may import: docs/ARCHITECTURE.md §1 and the import contracts in pyproject.toml.
"""
