"""Error codes shared by every process, the coded error of the wire, and the one exception the
codec raises (the codes and the exception live in protocol.error_codes, msgspec-free)."""

from __future__ import annotations

import msgspec

from protocol.error_codes import ErrorCode as ErrorCode
from protocol.error_codes import ProtocolError as ProtocolError


class ErrorInfo(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, rename="camel"):
    """A coded error as it travels on the wire and reaches a model or a user.

    `name` is the exception type it came from; `suggestion` says what to change.
    """

    code: str
    message: str
    name: str | None = None
    suggestion: str | None = None
    help_url: str | None = None
