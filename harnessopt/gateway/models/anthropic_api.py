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

from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from harnessopt.errors import UserError
from harnessopt.gateway.models.upstream import SdkUpstream
from harnessopt.protocols import FORWARDED_HEADERS, Forward, Model

if TYPE_CHECKING:
    import anthropic

DEFAULT_BASE_URL = "https://api.anthropic.com"
MESSAGES_PATH = "/v1/messages"
DEFAULT_MAX_RETRIES = 4


class AnthropicModel(SdkUpstream, Model):
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
        self.key_name = "ANTHROPIC_API_KEY"
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
        return self._post(anthropic, MESSAGES_PATH, body, options=options)

    def _error_fields(self, body: object) -> tuple[str | None, str]:
        err = body.get("error") if isinstance(body, dict) else None
        if isinstance(err, dict):  # {"type": "error", "error": {"type": ..., "message": ...}}
            return str(err.get("type") or "") or None, str(err.get("message") or "")
        return super()._error_fields(body)
