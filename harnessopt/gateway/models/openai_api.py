"""Any OpenAI-compatible Chat Completions endpoint as a ``Model`` (OpenAI, vLLM, Ollama, llama.cpp).

With ``wire_api="responses"`` (``model.wire_api``) the endpoint is spoken to in the Responses
API instead (``POST /responses``, ``translate.upstream_responses``), for upstreams that serve it.

The gateway hands this model a Messages API body; it is translated to a chat request
(``translate.messages_request_to_chat``), sent through the official ``openai`` SDK's low-level
``post`` (a raw-response cast, so fields the SDK does not know survive), and the chat completion
is translated back to a Messages API response. As with the ``anthropic`` model, the SDK is the
one place that retries (408, 409, 429, 5xx, connection failures, read timeouts; ``retry-after``
honoured; ``x-should-retry: false`` respected) and what it gave up on is raised as a
``ModelError`` with ``retryable=False``.

``max_tokens`` goes upstream as ``max_completion_tokens`` to the official API (its reasoning
models refuse ``max_tokens``) and as ``max_tokens`` to any other endpoint (what compatible
servers read). A response without ``usage`` is counted with the ceil(chars / 4) estimate.

Only this object ever holds the real key; it is never part of an error message or repr.
"""

from __future__ import annotations

from typing import Any

from harnessopt.errors import UserError
from harnessopt.gateway.http import estimate_input_tokens, estimate_tokens, text_of
from harnessopt.gateway.models.upstream import SdkUpstream
from harnessopt.gateway.translate import chat_response_to_messages, messages_request_to_chat
from harnessopt.gateway.translate.upstream_responses import (
    messages_request_to_responses,
    responses_response_to_messages,
)
from harnessopt.protocols import Forward, Model, ModelError

DEFAULT_BASE_URL = "https://api.openai.com/v1"
CHAT_PATH = "/chat/completions"  # relative to the base URL, which ends in /v1
RESPONSES_PATH = "/responses"
WIRE_APIS = ("chat", "responses")
DEFAULT_MAX_RETRIES = 4
PREFLIGHT_TIMEOUT_S = 5.0
TOOLS_PROBE_TIMEOUT_S = 120.0  # a local model on a CPU answers a short call in seconds
TOOLS_HINT = (
    "start llama.cpp's llama-server with --jinja, llama-cpp-python's server with "
    "--chat_format chatml-function-calling (or a model's function-calling format), vLLM with "
    "--enable-auto-tool-choice --tool-call-parser <parser>, and on Ollama use a model whose "
    'template supports tools (docs/models.md, "Local servers")'
)


def _prompt_tokens(completion: dict[str, Any]) -> int | None:
    usage = completion.get("usage")
    value = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    return value if isinstance(value, int) else None


class OpenAIModel(SdkUpstream, Model):
    """Forwards Messages API calls, translated, to a Chat Completions endpoint."""

    name = "openai"

    def __init__(
        self,
        api_key: str | None,
        base_url: str | None = None,
        *,
        key_name: str = "OPENAI_API_KEY",
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout_s: float = 600.0,
        wire_api: str = "chat",
    ):
        if wire_api not in WIRE_APIS:
            raise UserError(f"model.wire_api {wire_api!r} is not one of {', '.join(WIRE_APIS)}")
        self.wire_api = wire_api
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        if not api_key:
            raise UserError(
                f"set {key_name} in the environment to call the openai upstream at {self.base_url} "
                "(a local server that needs no key accepts any value), or use another model.provider"
            )
        try:
            import openai  # deferred, like the anthropic SDK: only runs that call a model pay the import
        except ImportError:
            raise UserError(
                "model provider 'openai' needs the openai SDK: pip install 'harnessopt[openai]'"
            ) from None

        self.key_name = key_name
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        self.token_field = "max_completion_tokens" if self.base_url == DEFAULT_BASE_URL else "max_tokens"
        self._secret = api_key
        self._client = openai.OpenAI(
            api_key=api_key, base_url=self.base_url, max_retries=max_retries, timeout=timeout_s
        )

    def __repr__(self) -> str:  # never show the key in logs or tracebacks
        return (
            f"OpenAIModel(base_url={self.base_url!r}, wire_api={self.wire_api!r}, "
            f"max_retries={self.max_retries})"
        )

    def check(self, request: dict[str, Any]) -> None:
        """ModelError 400 naming the field when ``request`` has no equivalent in the upstream's API.

        The gateway asks before it forwards, so such a request is refused and not counted as a call.
        """
        self._upstream_body(request)

    def _upstream_body(self, request: dict[str, Any]) -> dict[str, Any]:
        body = {k: v for k, v in request.items() if k != "stream"}
        if self.wire_api == "responses":
            return messages_request_to_responses(body)
        return messages_request_to_chat(body, token_field=self.token_field)

    def create(self, request: dict[str, Any], role: str, *, forward: Forward | None = None) -> dict[str, Any]:
        """Translate, POST to /chat/completions, translate back; raise ModelError on an API error.

        ``forward`` (Anthropic beta headers) has no meaning for this upstream and is ignored.
        """
        import openai

        body = self._upstream_body(request)
        path = RESPONSES_PATH if self.wire_api == "responses" else CHAT_PATH
        data = self._post(openai, path, body)
        if self.wire_api == "responses":
            message = responses_response_to_messages(data, str(request.get("model") or ""))
        else:
            message = chat_response_to_messages(data, str(request.get("model") or ""))
        if not isinstance(data.get("usage"), dict):  # a server that reports no usage: estimate it
            out = sum(estimate_tokens(text_of([b])) for b in message["content"])
            message["usage"] = {
                "input_tokens": estimate_input_tokens(request),
                "output_tokens": out,
                "estimated": True,  # the gateway labels these counts wherever they appear
            }
        return message

    def check_model_name(self, name: str, setting: str) -> None:
        """UserError when the server lists its models (``GET /models``) and ``name`` is not one.

        A server without the list (404, or an answer that is not one) is not judged on the name;
        then the path calls go to must exist (`check_path`).
        """
        import openai

        try:
            listed = self._client.with_options(max_retries=0, timeout=PREFLIGHT_TIMEOUT_S).models.list()
            ids = [str(m.id) for m in listed.data]
        except (openai.OpenAIError, TypeError, ValueError, AttributeError):
            self.check_path(setting.rsplit(".", 1)[0] + ".base_url")
            return
        if ids and name not in ids:
            shown = ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")
            raise UserError(
                f"{setting} {name!r} is not a model the server at {self.base_url} serves (it lists: {shown}); "
                f"set {setting} to one of them"
            )

    def check_path(self, setting: str) -> None:
        """UserError when the path every call goes to (``/chat/completions``, or ``/responses``)
        is not there: a ``base_url`` without its ``/v1``, or another service on the port, failed
        every task of round 1 on "HTTP 404" and burnt the round (QA). An empty body costs nothing:
        a real endpoint refuses it (400, 422) before any model runs; a missing one answers 404,
        405 or 501. An answer that is no status (a timeout, a reset) is not judged."""
        import openai

        path = RESPONSES_PATH if self.wire_api == "responses" else CHAT_PATH
        client = self._client.with_options(max_retries=0, timeout=PREFLIGHT_TIMEOUT_S)
        try:
            client.post(path, body={}, cast_to=openai.APIResponse[object])
        except openai.APIStatusError as e:
            if e.status_code in (404, 405, 501):
                raise UserError(
                    f"the server at {self.base_url} has no {path} (POST {self.base_url}{path} answered HTTP "
                    f"{e.status_code}); {setting} should be the API's root, which often ends in /v1"
                ) from None
        except openai.OpenAIError:
            return

    def check_tools(self, name: str, setting: str) -> str | None:
        """A warning when the server seems to ignore ``tools``: the same call with and without one.

        llama.cpp's server without ``--jinja`` (and llama-cpp-python's default chat format) leaves
        the tool definitions out of the prompt, so a tool-using harness never gets a call; such a
        server counts the same prompt tokens either way and the model calls no tool. A warning,
        not an error: a server may also misreport its usage (llama-cpp-python's
        chatml-function-calling format does). A server that reports no usage passes.
        """
        fn: dict[str, Any] = {
            "name": "ping",
            "description": "Answer a ping with pong; call it whenever asked to ping.",
        }
        fn["parameters"] = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
        body = {
            "model": name,
            "messages": [{"role": "user", "content": "Call the ping tool."}],
            self.token_field: 1,
        }
        plain = self._probe_call(body)
        tools = [{"type": "function", "function": fn}]
        tooled = self._probe_call({**body, "tools": tools, self.token_field: 64})  # room for a call
        choice = (tooled.get("choices") or [{}])[0] if isinstance(tooled.get("choices"), list) else {}
        if (choice.get("message") or {}).get("tool_calls"):
            return None
        without, with_tool = (_prompt_tokens(d) for d in (plain, tooled))
        if without is not None and with_tool is not None and with_tool <= without:
            return (
                f"the server at {self.base_url} seems to ignore `tools` ({setting} {name!r}: a request with "
                f"a tool counted {with_tool} prompt tokens, the same request without it {without}, and "
                f"no tool was called): the tool-agent template may never get a tool call; {TOOLS_HINT}"
            )
        return None

    def _probe_call(self, body: dict[str, Any]) -> dict[str, Any]:
        import openai

        client = self._client.with_options(max_retries=0, timeout=TOOLS_PROBE_TIMEOUT_S)
        try:
            return self._parse(client.post(CHAT_PATH, body=body, cast_to=openai.APIResponse[object]).read())
        except (openai.OpenAIError, ModelError) as e:
            raise UserError(
                f"the server at {self.base_url} refused a check call ({str(e)[:200]}); "
                f"the tool-agent template needs function calling: {TOOLS_HINT}"
            ) from None

    def _error_fields(self, body: object) -> tuple[str | None, str]:
        if isinstance(body, dict):  # the SDK hands over the body's "error" object
            return None, str(body.get("message") or "")
        return super()._error_fields(body)
