"""The daemon and its CLI. Never imports agent_process."""
