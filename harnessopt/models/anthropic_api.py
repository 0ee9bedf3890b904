"""The real Messages API as a ``Model``: the gateway forwards request bodies here.

The standard library's urllib rather than the SDK: the gateway already has a finished request
body and wants the raw response body back (fields the SDK does not know survive), it controls
retries itself, and the harnessopt process does not pay the SDK's import time. Only this object
ever holds the real API key.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
import urllib.error
import urllib.request
from email.message import Message
from typing import Any

from harnessopt.errors import UserError
from harnessopt.protocols import ModelError

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504, 529}


class AnthropicModel:
    """Forwards non-streaming Messages API calls upstream, retrying 429/5xx with backoff."""

    name = "anthropic"

    def __init__(
        self,
        api_key: str | None,
        base_url: str | None = None,
        *,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        timeout_s: float = 600.0,
    ):
        if not api_key:
            raise UserError(
                "set ANTHROPIC_API_KEY in the environment to call the Anthropic API, "
                "or use the scripted model (model.provider: scripted)"
            )
        self._api_key = api_key
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s

    def __repr__(self) -> str:  # never show the key in logs or tracebacks
        return f"AnthropicModel(base_url={self.base_url!r})"

    def create(self, request: dict[str, Any], role: str) -> dict[str, Any]:
        """POST the body to /v1/messages; return the response body or raise ModelError."""
        body = {k: v for k, v in request.items() if k != "stream"}
        attempt = 0
        while True:
            try:
                return self._post_once(body)
            except ModelError as e:
                if not e.retryable or attempt >= self.max_retries:
                    raise
                delay = (isinstance(e, UpstreamError) and e.retry_after) or self.backoff_s * 2**attempt
                # Jitter keeps concurrent task runs from retrying in lock step.
                time.sleep(min(delay, 60.0) * (0.75 + 0.5 * random.random()))
                attempt += 1

    def _post_once(self, body: dict[str, Any]) -> dict[str, Any]:
        headers = {
            "x-api-key": self._api_key,
            "anthropic-version": API_VERSION,
            "content-type": "application/json",
        }
        url = f"{self.base_url}/v1/messages"
        req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as e:
            raise _error_from(e.code, e.read(), e.headers) from None
        except TimeoutError as e:
            raise ModelError(
                504, "api_error", f"upstream timed out after {self.timeout_s:.0f}s", retryable=True
            ) from e
        except (urllib.error.URLError, OSError) as e:
            raise ModelError(502, "api_error", f"cannot reach {self.base_url}: {e}", retryable=True) from e
        try:
            data = json.loads(raw)
        except ValueError as e:
            raise ModelError(502, "api_error", "upstream returned a non-JSON body", retryable=True) from e
        if not isinstance(data, dict):
            raise ModelError(502, "api_error", "upstream returned a non-object JSON body", retryable=True)
        return data


class UpstreamError(ModelError):
    """An error response from upstream, with the server's ``retry-after`` hint if it gave one."""

    retry_after: float | None = None


def _error_from(status: int, raw: bytes, headers: Message) -> ModelError:
    """Map an upstream error response to a ModelError, keeping its status and error type."""
    error_type, message = "api_error", raw[:500].decode(errors="replace") or f"HTTP {status}"
    try:
        err = json.loads(raw).get("error") or {}
        error_type = str(err.get("type") or error_type)
        message = str(err.get("message") or message)
    except (ValueError, AttributeError):
        pass
    header = headers.get("x-should-retry")
    retryable = header == "true" if header in ("true", "false") else status in _RETRY_STATUS
    e = UpstreamError(status, error_type, f"upstream: {message}", retryable=retryable)
    with contextlib.suppress(ValueError):
        e.retry_after = float(headers.get("retry-after") or "")
    return e
