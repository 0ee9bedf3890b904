"""Tool-agent harness: a tool-use loop the skill can steer, on the Messages or the Chat Completions API.

The skill body is the system prompt; the model may call these tools until it calls ``finish``
or runs out of steps:

* ``read_skill_file(path)``: a file under the skill directory (e.g. references/*.md)
* ``python_eval(expression)``: an arithmetic expression (numbers, + - * / // % **, parentheses,
  abs/round/min/max); nothing else is evaluated
* ``finish(answer)``: the final answer

If the model stops without ``finish``, its last text is the answer. Every step is appended to
OUT/trajectory.jsonl.

The API is the Messages API (anthropic SDK, ANTHROPIC_BASE_URL/ANTHROPIC_API_KEY) unless the
feature flag HO_FLAG_API=chat (``flags: {api: chat}`` in harnessopt.yaml) selects the Chat
Completions API (openai SDK, OPENAI_BASE_URL/OPENAI_API_KEY). Inside harnessopt both point at
the model gateway, which serves either API whatever the upstream.

Usage: python harness/run.py --task TASK_JSON --skill SKILL_DIR --out OUT_DIR
"""

import argparse
import ast
import json
import operator
import os
import sys
import time
from pathlib import Path

MAX_STEPS = 8
MAX_TOKENS = 1024
MAX_FILE_CHARS = 20_000

TOOLS = [
    {
        "name": "read_skill_file",
        "description": "Read a text file of the skill, by path relative to the skill directory.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
    {
        "name": "python_eval",
        "description": "Evaluate an arithmetic expression (numbers, + - * / // % **, abs, round, min, max).",
        "input_schema": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
    {
        "name": "finish",
        "description": "Give the final answer to the task. Call this exactly once, at the end.",
        "input_schema": {
            "type": "object",
            "properties": {"answer": {"type": "string"}},
            "required": ["answer"],
        },
    },
]

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCS = {"abs": abs, "round": round, "min": min, "max": max}


def safe_eval(expression: str) -> float | int:
    """Evaluate arithmetic only: any other syntax raises ValueError."""

    def ev(node: ast.AST) -> float | int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 1000:
                raise ValueError("exponent too large")
            return _BINARY[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](ev(node.operand))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS:
            if node.keywords:
                raise ValueError("keyword arguments are not supported")
            return _FUNCS[node.func.id](*[ev(a) for a in node.args])
        raise ValueError(f"not allowed in an arithmetic expression: {type(node).__name__}")

    return ev(ast.parse(expression, mode="eval"))


def read_skill_file(skill_dir: Path, rel: str) -> str:
    root = skill_dir.resolve()
    path = (root / rel).resolve()
    if not path.is_relative_to(root):
        raise ValueError(f"{rel} is outside the skill directory")
    if not path.is_file():
        files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
        raise ValueError(f"no such skill file: {rel}; files: {', '.join(files[:50])}")
    text = path.read_text(errors="replace")
    return text if len(text) <= MAX_FILE_CHARS else text[:MAX_FILE_CHARS] + "\n[... truncated]"


def run_tool(name: str, args: dict, skill_dir: Path) -> tuple[str, bool]:
    """(result text, is_error) of one tool call other than finish."""
    try:
        if name == "read_skill_file":
            return read_skill_file(skill_dir, str(args.get("path", ""))), False
        if name == "python_eval":
            return repr(safe_eval(str(args.get("expression", "")))), False
        return f"unknown tool {name!r}", True
    except (ValueError, SyntaxError, ArithmeticError, TypeError, OverflowError) as e:
        return f"{type(e).__name__}: {e}", True


def skill_body(skill_dir: Path) -> str:
    text = (skill_dir / "SKILL.md").read_text()
    if text.startswith("---"):
        end = text.find("\n---", 3)
        if end != -1:
            text = text[end + 4 :]
    return text.strip()


def log_event(out_dir: Path, kind: str, **data: object) -> None:
    with open(out_dir / "trajectory.jsonl", "a") as f:
        f.write(json.dumps({"t": round(time.time(), 3), "event": kind, **data}, default=str) + "\n")


class MessagesAPI:
    """One conversation on the Messages API (anthropic SDK)."""

    def __init__(self, client, model: str, system: str, user: str):
        self.client, self.model, self.system = client, model, system
        self.messages: list[dict] = [{"role": "user", "content": user}]

    def step(self) -> tuple[str, list[tuple[str, str, dict]], str]:
        """(text, [(call id, tool name, input)], stop reason) of one model turn."""
        response = self.client.messages.create(
            model=self.model, max_tokens=MAX_TOKENS, system=self.system, messages=self.messages, tools=TOOLS
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

    TOOLS = [
        {
            "type": "function",
            "function": {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]},
        }
        for t in TOOLS
    ]

    def __init__(self, client, model: str, system: str, user: str):
        self.client, self.model = client, model
        self.messages: list[dict] = [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def step(self) -> tuple[str, list[tuple[str, str, dict]], str]:
        response = self.client.chat.completions.create(
            model=self.model, max_tokens=MAX_TOKENS, messages=self.messages, tools=self.TOOLS
        )
        choice = response.choices[0]
        reply: dict = {"role": "assistant", "content": choice.message.content}
        calls = []
        for call in choice.message.tool_calls or []:
            fn = {"name": call.function.name, "arguments": call.function.arguments}
            reply.setdefault("tool_calls", []).append({"id": call.id, "type": "function", "function": fn})
            try:
                args = json.loads(call.function.arguments or "{}")
            except ValueError:
                args = None  # the model wrote arguments that are not JSON: said so in the result
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


def agent_loop(api, out_dir: Path, skill_dir: Path) -> str:
    """Model turns until ``finish``, a turn without tool calls, or MAX_STEPS; returns the answer."""
    last_text = ""
    for step in range(1, MAX_STEPS + 1):
        text, calls, stop_reason = api.step()
        last_text = text or last_text
        log_event(out_dir, "step", step=step, stop_reason=stop_reason, tools=[name for _, name, _ in calls])
        if not calls:
            return last_text
        results = []
        for call_id, name, args in calls:
            if name == "finish":
                log_event(out_dir, "finish", step=step)
                return str(args.get("answer", "")).strip()
            if "_invalid" in args:
                out, is_error = f"arguments are not a JSON object: {args['_invalid']!r}", True
            else:
                out, is_error = run_tool(name, args, skill_dir)
            log_event(out_dir, "tool", name=name, input=args, is_error=is_error, result=out[:2000])
            results.append((call_id, out, is_error))
        api.results(results)
    log_event(out_dir, "max_steps", steps=MAX_STEPS)
    return last_text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", type=Path, required=True)
    parser.add_argument("--skill", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    task = json.loads(args.task.read_text())
    model = os.environ.get("HARNESSOPT_TARGET_MODEL")
    if not model:
        print("tool-agent harness: HARNESSOPT_TARGET_MODEL is not set", file=sys.stderr)
        return 2

    value = task["input"]
    user = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    api_name = os.environ.get("HO_FLAG_API") or "messages"
    log_event(args.out, "start", api=api_name, flags_read={"api": os.environ.get("HO_FLAG_API")})
    # The SDK is imported late: its import dominates startup time.
    if api_name == "chat":
        from openai import OpenAI

        api = ChatAPI(OpenAI(max_retries=2), model, skill_body(args.skill), user)
    elif api_name == "messages":
        from anthropic import Anthropic

        api = MessagesAPI(Anthropic(max_retries=2), model, skill_body(args.skill), user)
    else:
        print(f"tool-agent harness: HO_FLAG_API={api_name!r}: use messages or chat", file=sys.stderr)
        return 2
    answer = agent_loop(api, args.out, args.skill)
    (args.out / "answer.txt").write_text(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
