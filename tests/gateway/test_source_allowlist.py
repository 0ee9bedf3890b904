"""Sources the API would read from outside the request, at any depth, and server-side betas
(issue 20, item 3): refused or not forwarded unless ``model.allow_server_tools``.

The attacks of the review: an image fetched by URL inside a document's ``content`` source, and
a Files API upload read by id with the files beta, from target and optimizer leases alike.
"""

from __future__ import annotations

from typing import Any

import pytest

from harnessopt.config import Config, ModelConfig, OptimizerConfig
from harnessopt.gateway.models import ScriptedModel
from harnessopt.gateway.server import Gateway
from harnessopt.protocols import Forward

try:
    import httpx
except ImportError:  # anthropic 2.x ships its HTTP client as httpx2
    import httpx2 as httpx  # type: ignore[no-redef]

TARGET = "claude-haiku-4-5"
OPTIMIZER = "claude-opus-4-1"
SCRIPT = {"rules": [], "default": "ok"}
PNG_1PX = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="

URL_IN_DOCUMENT = {
    "type": "document",
    "source": {
        "type": "content",
        "content": [
            {"type": "text", "text": "see the picture"},
            {"type": "image", "source": {"type": "url", "url": "https://example.invalid/?leak=answer"}},
        ],
    },
}
FILE_DOCUMENT = {"type": "document", "source": {"type": "file", "file_id": "file_011CNha8iCJcU1wXNR6q4V8w"}}
FILE_UPLOAD = {"type": "container_upload", "file_id": "file_011CNha8iCJcU1wXNR6q4V8w"}
FILES_BETA = "files-api-2025-04-14"
CLAUDE_CODE_BETAS = (  # what Claude Code 2.1 sends; on newer models (claude-opus-4-8) system-role
    # messages too, with their beta: dropped, the real API would refuse those messages (QA)
    "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,"
    "fine-grained-tool-streaming-2025-05-14,prompt-caching-scope-2026-01-05,effort-2025-11-24,"
    "mid-conversation-system-2026-04-07"
)


class Recording(ScriptedModel):
    """The scripted model, keeping what each call forwarded."""

    forwards: list[Forward]

    def create(self, request: dict[str, Any], role: str, *, forward: Forward | None = None) -> dict[str, Any]:
        self.forwards.append(forward or Forward())
        return super().create(request, role, forward=forward)


def gateway(allow: bool = False) -> tuple[Gateway, Recording]:
    model = Recording.from_dict(SCRIPT)
    model.forwards = []
    cfg = Config(
        model=ModelConfig(provider="scripted", target=TARGET, allow_server_tools=allow),
        optimizer=OptimizerConfig(model=OPTIMIZER),
    )
    return Gateway.from_config(model, cfg), model


def post(gw: Gateway, role: str, blocks: list[dict[str, Any]], beta: str | None = None) -> httpx.Response:
    token = gw.lease(role, 1, "t1" if role == "target" else None).token
    body = {
        "model": TARGET if role == "target" else OPTIMIZER,
        "max_tokens": 16,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "read this"}, *blocks]}],
    }
    headers = {"x-api-key": token} | ({"anthropic-beta": beta} if beta else {})
    with httpx.Client(base_url=gw.base_url) as http:
        return http.post("/v1/messages", json=body, headers=headers)


@pytest.mark.parametrize("role", ["target", "optimizer"])
@pytest.mark.parametrize(
    ("block", "where"),
    [
        (URL_IN_DOCUMENT, "messages[0].content[1].source.content[1].source.type"),
        (FILE_DOCUMENT, "messages[0].content[1].source.type"),
        (FILE_UPLOAD, "messages[0].content[1].file_id"),
        (
            {"type": "tool_result", "tool_use_id": "t", "content": [URL_IN_DOCUMENT]},
            "messages[0].content[1].content[0].source.content[1].source.type",
        ),
    ],
)
def test_sources_read_from_outside_the_request_are_refused_at_any_depth(
    role: str, block: dict[str, Any], where: str
) -> None:
    gw, model = gateway()
    with gw:
        r = post(gw, role, [block], beta=FILES_BETA)
        assert r.status_code == 400 and r.headers["x-should-retry"] == "false", r.text
        message = r.json()["error"]["message"]
        assert message.startswith(where + ":") and "model.allow_server_tools" in message
        assert model.forwards == [] and gw.total().calls == 0


def test_inline_sources_and_lookalike_tool_data_pass() -> None:
    gw, model = gateway()
    inline = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_1PX}},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "a doc"}},
        {"type": "document", "source": {"type": "content", "content": [{"type": "text", "text": "x"}]}},
    ]
    with gw:
        assert post(gw, "target", inline).status_code == 200
        # A custom tool's schema or input may hold a field named "source": it is data, not a source.
        token = gw.lease("target", 1, "t2").token
        schema = {"type": "object", "properties": {"source": {"type": "url"}, "file_id": {"type": "string"}}}
        body = {
            "model": TARGET,
            "max_tokens": 16,
            "tools": [{"name": "fetch_doc", "input_schema": schema}],
            "messages": [
                {"role": "user", "content": "go"},
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": "tu1",
                            "name": "fetch_doc",
                            "input": {"source": {"type": "url"}},
                        }
                    ],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu1", "content": "ok"}]},
            ],
        }
        with httpx.Client(base_url=gw.base_url) as http:
            assert http.post("/v1/messages", json=body, headers={"x-api-key": token}).status_code == 200


def test_server_side_betas_are_not_forwarded_and_claude_codes_are() -> None:
    gw, model = gateway()
    with gw:
        beta = f"{CLAUDE_CODE_BETAS},{FILES_BETA},web-fetch-2025-09-10,code-execution-2025-08-25,mcp-client-2025-11-20"
        assert post(gw, "target", [], beta=beta).status_code == 200
        assert post(gw, "optimizer", [], beta=FILES_BETA).status_code == 200
    assert model.forwards[0].headers["anthropic-beta"] == CLAUDE_CODE_BETAS
    assert "anthropic-beta" not in model.forwards[1].headers
    assert any(FILES_BETA in note and "model.allow_server_tools" in note for note in gw.notes)


def test_allow_server_tools_lets_sources_and_betas_through() -> None:
    gw, model = gateway(allow=True)
    with gw:
        assert post(gw, "target", [FILE_DOCUMENT, URL_IN_DOCUMENT], beta=FILES_BETA).status_code == 200
    assert model.forwards[0].headers["anthropic-beta"] == FILES_BETA
