"""Exit codes of every command (ARCHITECTURE.md §9)."""

EXIT_OK = 0
EXIT_RUNTIME = 1
"""A runtime error: the daemon is not running, a turn failed, a reply was an error."""
EXIT_USAGE = 2
"""Bad usage or an invalid bundle: nothing was started."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (128 + SIGINT, as shells report it): the command stopped waiting."""
