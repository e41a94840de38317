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
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    retry_after = _retry_after(exc)
    for name, code, fix in _TABLE:
        if name in names:
            message = f"{provider} model {model!r}: {_describe(exc)}"
            return ModelError(code, message, suggestion=fix, status=status, retry_after=retry_after)
    return ModelError(
        ErrorCode.E_MODEL_ERROR,
        f"{provider} model {model!r} failed: {_describe(exc)}",
        suggestion="see the provider's status; the SDK already retried",
        status=status,
        retry_after=retry_after,
    )


def _retry_after(exc: Exception) -> float | None:
    """The `retry-after` header of the provider's answer, in seconds (a number; the HTTP-date
    form is not used by model providers)."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    raw = headers.get("retry-after") if headers is not None else None
    try:
        return max(0.0, float(raw)) if raw is not None else None
    except ValueError:
        return None


def _describe(exc: Exception) -> str:
    status = getattr(exc, "status_code", None)
    prefix = f"HTTP {status}: " if status is not None else ""
    return f"{prefix}{type(exc).__name__}: {exc}"
