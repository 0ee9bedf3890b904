"""The tool-agent template with its model calls made by the anthropic and openai SDKs, for tests.

    python tests/support/tool_agent_sdk.py --task TASK_JSON --skill SKILL_DIR --out OUT_DIR

Runs workspace_templates/tool-agent/run.py's ``main`` (tools, agent loop, trajectory events)
with ``open_api`` swapped for the conversations the template had before its client moved to
``http.client``: the SDK calls below, kept verbatim. tests/test_tool_agent.py runs both on the
same fake endpoint and compares what reaches it and what comes out.
"""

import importlib.util
import sys
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parents[2] / "workspace_templates" / "tool-agent" / "run.py"
spec = importlib.util.spec_from_file_location("tool_agent_template", TEMPLATE)
assert spec is not None and spec.loader is not None
template = importlib.util.module_from_spec(spec)
spec.loader.exec_module(template)
MAX_TOKENS, TOOLS = template.MAX_TOKENS, template.TOOLS


class MessagesAPI:
    """One conversation on the Messages API (anthropic SDK)."""

    def __init__(self, client, model: str, system: str, user: str, tools: list = TOOLS):
        self.client, self.model, self.system, self.tools = client, model, system, tools
        self.messages: list[dict] = [{"role": "user", "content": user}]

    def step(self) -> tuple[str, list[tuple[str, str, dict]], str]:
        response = self.client.messages.create(
            model=self.model,
            max_tokens=MAX_TOKENS,
            system=self.system,
            messages=self.messages,
            tools=self.tools,
        )
        self.messages.append(
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in response.content]}
        )
        text = "".join(b.text for b in response.content if b.type == "text").strip()
        calls = [(b.id, b.name, dict(b.input)) for b in response.content if b.type == "tool_use"]
        return text, calls, str(response.stop_reason)

    def results(self, results: list[tuple[str, str, bool]]) -> None:
        blocks = [
            {"type": "tool_result", "tool_use_id": i, "content": t, "is_error": e} for i, t, e in results
        ]
        self.messages.append({"role": "user", "content": blocks})


class ChatAPI:
    """One conversation on the Chat Completions API (openai SDK)."""

    def __init__(self, client, model: str, system: str, user: str, tools: list = TOOLS):
        self.client, self.model = client, model
        self.tools = [
            {
                "type": "function",
                "function": {
                    "name": t["name"],
                    "description": t["description"],
                    "parameters": t["input_schema"],
                },
            }
            for t in tools
        ]
        self.messages: list[dict] = [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def step(self) -> tuple[str, list[tuple[str, str, dict]], str]:
        response = self.client.chat.completions.create(
            model=self.model, max_tokens=MAX_TOKENS, messages=self.messages, tools=self.tools
        )
        choice = response.choices[0]
        reply: dict = {"role": "assistant", "content": choice.message.content}
        calls = []
        for call in choice.message.tool_calls or []:
            fn = {"name": call.function.name, "arguments": call.function.arguments}
            reply.setdefault("tool_calls", []).append({"id": call.id, "type": "function", "function": fn})
            try:
                args = template.json.loads(call.function.arguments or "{}")
            except ValueError:
                args = None
            calls.append(
                (
                    call.id,
                    call.function.name,
                    args if isinstance(args, dict) else {"_invalid": call.function.arguments},
                )
            )
        self.messages.append(reply)
        return (choice.message.content or "").strip(), calls, str(choice.finish_reason)

    def results(self, results: list[tuple[str, str, bool]]) -> None:
        for call_id, text, is_error in results:
            self.messages.append(
                {"role": "tool", "tool_call_id": call_id, "content": f"Error: {text}" if is_error else text}
            )


def open_api(api_name: str, model: str, system: str, user: str, tools: list = TOOLS):
    if api_name == "chat":
        from openai import OpenAI

        return ChatAPI(OpenAI(max_retries=2), model, system, user, tools)
    if api_name == "messages":
        from anthropic import Anthropic

        return MessagesAPI(Anthropic(max_retries=2), model, system, user, tools)
    return None


if __name__ == "__main__":
    template.open_api = open_api
    sys.exit(template.main())
