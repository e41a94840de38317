"""The agent logger is built on its first use and carries the agent and instance key."""

from __future__ import annotations

from structlog.testing import capture_logs

from agent_process.tool_context import agent_logger


def test_the_agent_logger_carries_agent_and_instance_key() -> None:
    with capture_logs() as logs:
        logger = agent_logger("coder", "k1")
        logger.info("direct")
        logger.bind(tool="bash").warning("bound")
    assert logs == [
        {"agent": "coder", "instance_key": "k1", "event": "direct", "log_level": "info"},
        {
            "agent": "coder",
            "instance_key": "k1",
            "tool": "bash",
            "event": "bound",
            "log_level": "warning",
        },
    ]
