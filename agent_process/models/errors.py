"""Provider SDK exceptions -> ModelError with an E_MODEL_* code and a message saying what to do.

Both official SDKs (openai, anthropic) share the exception names, so one table serves both.
This runs after the SDK's own retries (`maxRetries` in `Model.spec.options`) gave up.
"""

from __future__ import annotations

from agent_process.models.base import ModelError
from protocol.errors import ErrorCode

# Checked in order: APITimeoutError subclasses APIConnectionError.
_TABLE: tuple[tuple[str, ErrorCode, str], ...] = (
    ("AuthenticationError", ErrorCode.E_MODEL_AUTH, "check the Model's apiKey"),
    ("PermissionDeniedError", ErrorCode.E_MODEL_AUTH, "check the key's access to this model"),
    ("RateLimitError", ErrorCode.E_MODEL_RATE_LIMIT, "wait, or raise the provider's limits"),
    ("APITimeoutError", ErrorCode.E_MODEL_TIMEOUT, "retry, or raise options.timeoutSeconds"),
    ("APIConnectionError", ErrorCode.E_MODEL_CONNECTION, "check the Model's endpoint"),
    ("BadRequestError", ErrorCode.E_MODEL_BAD_REQUEST, "check the model name and params"),
    ("NotFoundError", ErrorCode.E_MODEL_BAD_REQUEST, "check the model name and endpoint"),
    ("UnprocessableEntityError", ErrorCode.E_MODEL_BAD_REQUEST, "check the model params"),
)


def map_provider_error(provider: str, model: str, exc: Exception) -> ModelError:
    names = {cls.__name__ for cls in type(exc).__mro__}
    for name, code, fix in _TABLE:
        if name in names:
            return ModelError(code, f"{provider} model {model!r}: {_describe(exc)}", suggestion=fix)
    return ModelError(
        ErrorCode.E_MODEL_ERROR,
        f"{provider} model {model!r} failed: {_describe(exc)}",
        suggestion="see the provider's status; the SDK already retried",
    )


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    prefix = f"HTTP {status}: " if status is not None else ""
    return f"{prefix}{type(exc).__name__}: {exc}"
