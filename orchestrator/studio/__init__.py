"""`goondan studio`: the web dashboard, a separate process beside the daemon (ARCHITECTURE.md §14).

It reads what the CLI reads: the daemon through its control socket (`link.py`) and the state
files (conversations, runtime events, logs). A bug here cannot take the daemon down.
"""
