"""`goondan eval FILE`: a swarm's regression suite (docs/guides/evals.md).

`spec` parses the eval file, `evaluators` checks one reply, `runner` runs the cases in a daemon
started for the run, `report` prints the table and writes JUnit/JSON.
"""
