"""The real Messages API as a ``Model``: the gateway forwards request bodies here.

Calls go through the anthropic SDK's low-level ``post`` with a raw-response cast: the gateway
already has a finished request body, and it gets the response body back as upstream sent it,
so fields the SDK does not know survive. The SDK is also the one place that retries: 408,
409, 429, 5xx (529 included) and connection failures or read timeouts, up to ``max_retries``
times, waiting what the server's ``retry-after-ms``/``retry-after`` says or else its own
exponential backoff, and never against an ``x-should-retry: false``. What the SDK gave up on
is raised as a ``ModelError`` with ``retryable=False``, so the gateway answers the harness
with ``x-should-retry: false`` and the harness's client does not repeat the whole sequence.

Only this object ever holds the real API key; it is never part of an error message or repr.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from harnessopt.errors import UserError
from harnessopt.protocols import FORWARDED_HEADERS, Forward, Model, ModelError

if TYPE_CHECKING:
    import anthropic

DEFAULT_BASE_URL = "https://api.anthropic.com"
MESSAGES_PATH = "/v1/messages"
DEFAULT_MAX_RETRIES = 4

# Error type by status when an error body does not name one (the API's documented types).
_STATUS_TYPES = {
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


class AnthropicModel(Model):
    """Forwards non-streaming Messages API calls upstream through the anthropic SDK."""

    name = "anthropic"

    def __init__(
        self,
        api_key: str | None,
        base_url: str | None = None,
        *,
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout_s: float = 600.0,
    ):
        if not api_key:
            raise UserError(
                "set ANTHROPIC_API_KEY in the environment to call the Anthropic API, "
                "or use the scripted model (model.provider: scripted)"
            )
        import anthropic  # deferred: importing the SDK takes 1-2 s that other commands need not pay

        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        self._secret = api_key
        self._client = anthropic.Anthropic(
            api_key=api_key, base_url=self.base_url, max_retries=max_retries, timeout=timeout_s
        )

    def __repr__(self) -> str:  # never show the key in logs or tracebacks
        return f"AnthropicModel(base_url={self.base_url!r}, max_retries={self.max_retries})"

    def create(self, request: dict[str, Any], role: str, *, forward: Forward | None = None) -> dict[str, Any]:
        """POST the body to /v1/messages; return the raw response body or raise ModelError.

        ``forward``: the client's ``anthropic-beta``/``anthropic-version`` headers and query
        string (``beta=true``) go upstream with it; any other header is ignored.
        """
        import anthropic

        body = {k: v for k, v in request.items() if k != "stream"}
        options: anthropic.RequestOptions = {}
        if forward is not None:
            options["headers"] = {k: v for k, v in forward.headers.items() if k.lower() in FORWARDED_HEADERS}
            if forward.query:
                options["params"] = dict(parse_qsl(forward.query, keep_blank_values=True))
        try:
            response = self._client.post(
                MESSAGES_PATH, body=body, cast_to=anthropic.APIResponse[object], options=options
            )
            raw = response.read()
        except anthropic.APIStatusError as e:
            raise self._status_error(e) from None
        except anthropic.APITimeoutError as e:
            tries = _attempts(e.request)
            message = f"upstream did not answer within {self.timeout_s:g}s{tries}"
            raise ModelError(504, "timeout_error", message) from None
        except anthropic.APIConnectionError as e:
            message = f"connection to {self.base_url} failed: {_root_cause(e)}{_attempts(e.request)}"
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

    def _status_error(self, e: anthropic.APIStatusError) -> ModelError:
        """The error response the SDK gave up on (or did not retry), with its status and type."""
        status = e.status_code
        error_type, message = _STATUS_TYPES.get(status, "api_error"), ""
        err = e.body.get("error") if isinstance(e.body, dict) else None
        if isinstance(err, dict):
            error_type = str(err.get("type") or error_type)
            message = str(err.get("message") or "")
        elif isinstance(e.body, str):
            message = e.body[:500]
        message = message or f"HTTP {status}"
        tries = _attempts(e.response.request)
        if status == 401:
            text = f"upstream refused the API key ({message}); check ANTHROPIC_API_KEY{tries}"
        else:
            text = f"upstream: {message}{tries}"
        return ModelError(status, error_type, self._redact(text))

    def _redact(self, text: str) -> str:
        """``text`` without the API key (an upstream or proxy may echo it back)."""
        # A real key is long; a toy one ("k" in a test) would otherwise garble ordinary words.
        return text.replace(self._secret, "[redacted]") if len(self._secret) >= 8 else text


def _attempts(request: Any) -> str:
    """`` (gave up after N attempts)`` when the SDK retried, from its retry-count header."""
    try:
        retries = int(request.headers.get("x-stainless-retry-count") or 0)
    except (AttributeError, RuntimeError, ValueError):  # no request attached to the error
        return ""
    return f" (gave up after {retries + 1} attempts)" if retries else ""


def _root_cause(e: BaseException) -> str:
    """The innermost cause of a connection error, e.g. ``ConnectError: [Errno 111] ...``."""
    while e.__cause__ is not None:
        e = e.__cause__
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
