"""The fallback answer to a `call` frame no service took.

The router hands each op to its owner: spawn/list/catalog to `agents_calls`, the deferred ops
to `deferred_calls`, restart to `self_restart`. Anything that still arrives here (a newer
child's op, or a daemon built without that service) gets a coded error back, never silence,
so the calling tool fails at once instead of waiting for its timeout.
"""

from __future__ import annotations

from protocol.errors import ErrorCode, ErrorInfo
from protocol.messages import CallPayload, CallResultPayload


def answer_call(payload: CallPayload) -> CallResultPayload:
    return CallResultPayload(
        call_id=payload.call_id,
        ok=False,
        error=ErrorInfo(
            code=ErrorCode.E_NOT_IMPLEMENTED,
            message=f"the orchestrator has no handler for call {payload.op!r}",
            suggestion="run the agent under a goondan daemon of the same version",
        ),
    )
