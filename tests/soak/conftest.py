"""The soak drives a real daemon: reuse the integration fixture that always cleans it up."""

from tests.integration.conftest import start_daemon as start_daemon
