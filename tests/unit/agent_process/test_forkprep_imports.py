"""What the fork server imports before its first fork: each provider's adapter, and for the
HTTP SDKs the async backend their client imports only at its first request (else every new
child pays that import on its first model call)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
from agent_process.forkprep import preload
before = "anyio._backends._asyncio" in sys.modules
preload()
print(before, all(m in sys.modules for m in (
    "agent_process.models.openai_chat", "agent_process.models.anthropic_messages",
    "agent_process.models.scripted", "anyio._backends._asyncio")))
"""


def test_preload_imports_the_adapters_and_their_http_backend() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         timeout=120, check=True)  # fmt: skip
    assert out.stdout.split() == ["False", "True"]
