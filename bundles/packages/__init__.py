"""goondan packages as Python distributions (ARCHITECTURE.md §7): `installed` finds them
through their `goondan.packages` entry point, `requirements` checks a bundle's
`spec.dependencies` against what is installed."""
