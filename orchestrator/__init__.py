"""The daemon and its CLI. Never imports agent_process."""

__version__ = "0.1.0"
