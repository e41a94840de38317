"""Chaos suites drive real daemons: reuse the integration fixture that always cleans them up."""

from tests.integration.conftest import start_daemon as start_daemon
