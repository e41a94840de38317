"""One module per CLI command. Each exposes `name`, `help`, `configure(parser)` and
`run(args) -> int`; `orchestrator.cli` lists them explicitly (no import-time registry)."""
