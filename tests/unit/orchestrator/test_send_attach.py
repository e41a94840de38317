"""An attach whose store does not answer gets that store's coded error, not a handler's crash
(E_CONTROL_BAD_REQUEST "the daemon failed to handle SendText"): a cluster's `replies` bucket
without a leader for a moment made eleven sends of a `make cluster-faults` run fail so."""

from __future__ import annotations

from typing import cast

import pytest

from orchestrator.ingress.journal import JournalError
from orchestrator.ingress.send import SendContext, SendFailed, attach
from protocol.control import Attach
from protocol.error_codes import ErrorCode


class Unanswering:
    async def attach(self, event_id: str) -> None:
        raise JournalError(ErrorCode.E_CLUSTER_UNAVAILABLE, "the replies bucket did not answer",
                           "check the NATS servers")  # fmt: skip


class Context:
    acceptor = Unanswering()


async def test_an_attach_whose_store_does_not_answer_fails_with_its_code() -> None:
    with pytest.raises(SendFailed) as failed:
        await attach(cast(SendContext, Context()), Attach(request_id="r", event_id="e1"))
    assert failed.value.code is ErrorCode.E_CLUSTER_UNAVAILABLE
    assert "check the NATS servers" in failed.value.message
