"""What the SDK-backed models (``anthropic``, ``openai``) share: one POST through the SDK's
low-level client with a raw-response cast, and the ``ModelError`` each failure becomes.

The SDK is the one place that retries; what it gave up on is mapped here: an error status with
its canonical type and the upstream's message, a timeout to 504, a connection failure to 502
with its root cause, a body that is not a JSON object to 502. Every message that could echo the
request back is redacted of the key, which only the model object holds.
"""

from __future__ import annotations

import json
from typing import Any

from harnessopt.protocols import ModelError

# Error type by status when an error body does not name one (the Messages API's documented types).
STATUS_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}


class SdkUpstream:
    """A mixin for a model that holds ``_client`` (an SDK client), ``_secret`` (its key),
    ``key_name`` (the variable the key came from), ``base_url`` and ``timeout_s``."""

    _client: Any
    _secret: str
    key_name: str
    base_url: str
    timeout_s: float

    def _post(self, sdk: Any, path: str, body: dict[str, Any], **options: Any) -> dict[str, Any]:
        """POST ``body`` to ``path`` through the SDK (``sdk``: the ``anthropic`` or ``openai``
        module); the response body as a dict, or a ``ModelError``."""
        try:
            raw = self._client.post(path, body=body, cast_to=sdk.APIResponse[object], **options).read()
        except sdk.APIStatusError as e:
            raise self._status_error(e.status_code, e.body, e.response.request) from None
        except sdk.APITimeoutError as e:
            message = f"upstream did not answer within {self.timeout_s:g}s{attempts(e.request)}"
            raise ModelError(504, "timeout_error", message) from None
        except sdk.APIConnectionError as e:
            message = f"connection to {self.base_url} failed: {root_cause(e)}{attempts(e.request)}"
            raise ModelError(502, "api_error", self._redact(message)) from None
        return self._parse(raw)

    def _parse(self, raw: bytes) -> dict[str, Any]:
        # Not retried: a 200 means upstream did the work and billed it; asking again pays twice.
        try:
            data = json.loads(raw)
        except ValueError:
            snippet = raw[:120].decode(errors="replace")
            raise ModelError(
                502, "api_error", self._redact(f"upstream returned a non-JSON body: {snippet!r}")
            ) from None
        if not isinstance(data, dict):
            raise ModelError(502, "api_error", "upstream returned a non-object JSON body")
        return data

    def _error_fields(self, body: object) -> tuple[str | None, str]:
        """The error type (if the body names one) and message of an error response's body as the
        SDK gives it (each SDK unwraps it its own way)."""
        return None, body[:500] if isinstance(body, str) else ""

    def _status_error(self, status: int, body: object, request: Any) -> ModelError:
        """The error response the SDK gave up on (or did not retry), with its status and type."""
        named, message = self._error_fields(body)
        error_type = named or STATUS_TYPES.get(status, "api_error")
        message = message or f"HTTP {status}"
        tries = attempts(request)
        if status == 401:
            text = f"upstream refused the API key ({message}); check {self.key_name}{tries}"
        else:
            text = f"upstream: {message}{tries}"
        return ModelError(status, error_type, self._redact(text))

    def _redact(self, text: str) -> str:
        """``text`` without the API key (an upstream or proxy may echo it back)."""
        # A real key is long; a toy one ("k" in a test) would otherwise garble ordinary words.
        return text.replace(self._secret, "[redacted]") if len(self._secret) >= 8 else text


def attempts(request: Any) -> str:
    """`` (gave up after N attempts)`` when the SDK retried, from its retry-count header."""
    try:
        retries = int(request.headers.get("x-stainless-retry-count") or 0)
    except (AttributeError, RuntimeError, ValueError):  # no request attached to the error
        return ""
    return f" (gave up after {retries + 1} attempts)" if retries else ""


def root_cause(e: BaseException) -> str:
    """The innermost cause of a connection error, e.g. ``ConnectError: [Errno 111] ...``."""
    while e.__cause__ is not None:
        e = e.__cause__
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
