"""Fakes of local OpenAI-compatible servers as they really behave (llama.cpp, vLLM, Ollama).

``LocalServer(kind)`` serves ``GET /v1/models`` and ``POST /v1/chat/completions`` on loopback:

* ``llama.cpp``: llama-server's (and llama-cpp-python's) default chat format, which puts no
  tool definitions in the prompt: ``tools`` is accepted and ignored (the prompt tokens are the
  same with and without them, as measured on llama-cpp-python 0.3.36), the model answers text;
  ``/v1/models`` lists the one loaded model; usage is sent.
* ``vllm``: an unknown ``model`` is a 404 ``The model `X` does not exist.``; tools are honoured
  (asked to ping, the model calls the first tool; tools count prompt tokens); usage is sent.
* ``ollama``: like vLLM on tools, but (as the proxy of issue 23 imitated) no ``usage`` in the
  answer.
* ``bare``: no ``/v1/models`` (404), tools honoured, usage sent.

Every server ends an answer with ``finish_reason: "length"`` when ``max_tokens`` is under 8.
``requests`` holds every request (path and body).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODELS = {"llama.cpp": ["smollm2-135m"], "vllm": ["qwen2.5-7b"], "ollama": ["qwen2.5:0.5b"], "bare": []}


class LocalServer:
    def __init__(self, kind: str, answer: str = "Paris"):
        self.kind, self.answer = kind, answer
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.requests.append({"path": self.path, "body": None})
                if self.path.rstrip("/") == "/v1/models" and outer.kind != "bare":
                    data = [{"id": m, "object": "model", "owned_by": outer.kind} for m in MODELS[outer.kind]]
                    self._send(200, {"object": "list", "data": data})
                else:
                    self._send(404, {"error": {"message": "Not Found", "type": "not_found_error"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
                outer.requests.append({"path": self.path, "body": body})
                if self.path != "/v1/chat/completions":  # as the real servers: no other path
                    self._send(404, {"detail": "Not Found"})
                elif not body.get("messages"):  # refused before any model runs (vLLM 400, FastAPI 422)
                    self._send(422, {"detail": [{"loc": ["body", "messages"], "msg": "Field required"}]})
                else:
                    self._send(*outer.complete(body))

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def complete(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        model = body.get("model")
        if self.kind == "vllm" and model not in MODELS["vllm"]:
            message = f"The model `{model}` does not exist."
            return 404, {"object": "error", "message": message, "type": "NotFoundError", "code": 404}
        message: dict[str, Any] = {"role": "assistant", "content": self.answer}
        finish = "stop"
        tools = body.get("tools") or []
        if tools and self.kind != "llama.cpp" and "ping" in json.dumps(body["messages"]):
            name = tools[0]["function"]["name"]
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": name, "arguments": "{}"}}
                ],
            }
            finish = "tool_calls"
        limit = body.get("max_tokens") or body.get("max_completion_tokens") or 100
        if limit < 8 and message.get("content"):
            message["content"], finish = message["content"][:limit], "length"
        reply: dict[str, Any] = {
            "id": "chatcmpl-local",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        }
        if self.kind != "ollama":  # tools in the prompt cost prompt tokens, unless the server drops them
            prompt = 40 + (len(json.dumps(tools)) // 4 if self.kind != "llama.cpp" else 0)
            reply["usage"] = {"prompt_tokens": prompt, "completion_tokens": 3, "total_tokens": prompt + 3}
        return 200, reply

    def __enter__(self) -> LocalServer:
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
