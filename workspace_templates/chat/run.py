"""Chat harness: one Messages API request per task, on the standard library alone.

The skill body (SKILL.md without its front matter) is the system prompt, the task input is the
user message, and the reply text, stripped, is the answer. The model comes from
HARNESSOPT_TARGET_MODEL; the endpoint and key from ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY
(inside harnessopt these point at the model gateway with a per-run token). The request body is
the one the anthropic SDK sends; the client is ``http.client``, because importing the SDK costs
about a second of CPU per task (docs/performance.md). Like the SDK it retries twice on 408, 409,
429, 5xx and lost connections (``x-should-retry`` and ``retry-after`` honoured), and an API
error ends the run with the SDK's error name (``AuthenticationError``, ...). The ``chat-sdk``
template is this harness on the SDK. With the feature flag
HO_FLAG_STREAM=1 (``flags: {stream: "1"}`` in harnessopt.yaml) the request is streamed (SSE).

Skills as a catalogue: with HO_FLAG_SKILL_LOADING=catalogue, and always in a trigger run (a task
whose ``metadata.trigger`` lists distractor skills: harnessopt's ``objective: trigger``), the
system prompt holds the names and descriptions of this skill and the distractors, no body, and
the request offers a ``load_skill(name)`` tool. A trigger run ends with that one request (the
decision is what it measures); otherwise a ``load_skill`` call is answered with the skill's body
and a second request gives the answer. HO_FLAG_SKILL_LOADING is registered in harness/flags.yaml.

Usage: python harness/run.py --task TASK_JSON --skill SKILL_DIR --out OUT_DIR
"""

import argparse
import contextlib
import http.client
import json
import os
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

MAX_TOKENS = 1024
MAX_RETRIES = 2
TIMEOUT_S = 600.0
API_VERSION = "2026-10-21"  # the anthropic-version header the anthropic SDK (2.14) sends
ERROR_NAMES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    409: "ConflictError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
}


class APIError(Exception):
    """An error answer of the API (or no answer), named like the SDK's."""

    def __init__(self, name: str, status: int | None, body: str, retry: bool):
        super().__init__(f"{name}: {status or ''} {body[:2000]}".strip())
        self.name, self.status, self.retry = name, status, retry
        self.wait: float | None = None  # the server's retry-after, in seconds


def skill_body(skill_dir: Path) -> str:
    """SKILL.md without its YAML front matter."""
    text = (skill_dir / "SKILL.md").read_text(encoding="utf-8-sig")  # a BOM is not text
    if text.startswith("---"):
        end = text.find("\n---", 3)
        if end != -1:
            text = text[end + 4 :]
    return text.strip()


LOAD_SKILL = {
    "name": "load_skill",
    "description": "Load a skill's full instructions by its name. Call it first when a request matches "
    "a skill's description in the catalogue.",
    "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
}


def _split(text: str) -> tuple[dict, str]:
    """(``key: value`` lines of the front matter, folded lines joined; the body) of a SKILL.md text."""
    meta: dict = {}
    end = text.find("\n---", 3) if text.startswith("---") else -1
    if end == -1:
        return meta, text.strip()
    key = None
    for line in text[3:end].splitlines():
        if line[:1] not in (" ", "\t") and ":" in line:
            key, value = (x.strip() for x in line.split(":", 1))
            meta[key] = value.strip("'\"") if value not in (">", "|", ">-", "|-") else ""
        elif key and line.strip():
            meta[key] = (meta[key] + " " + line.strip()).strip()
    return meta, text[end + 4 :].strip()


def skill_catalogue(skill_dir: Path, task: dict) -> dict:
    """name -> (description, body) of this skill and the trigger run's distractors."""
    meta, body = _split((skill_dir / "SKILL.md").read_text(encoding="utf-8-sig"))  # a BOM is not text
    skills = {meta.get("name") or skill_dir.name: (meta.get("description", ""), body)}
    for d in ((task.get("metadata") or {}).get("trigger") or {}).get("distractors") or []:
        other = _split(str(d.get("skill_md", "")))[1]
        skills.setdefault(str(d.get("name")), (str(d.get("description", "")), other))
    return skills


def catalogue_prompt(skills: dict) -> str:
    listing = "".join(f"\n- {name}: {desc}" for name, (desc, _) in sorted(skills.items()))
    return (
        "You are a helpful assistant. These skills are available; when a request matches a skill's "
        f"description, call load_skill with its name before answering:{listing}"
    )


def user_message(task: dict) -> str:
    value = task["input"]
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def log_event(out_dir: Path, kind: str, **data: object) -> None:
    with open(out_dir / "trajectory.jsonl", "a") as f:
        f.write(json.dumps({"t": round(time.time(), 3), "event": kind, **data}) + "\n")


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
        print("chat harness: HARNESSOPT_TARGET_MODEL is not set", file=sys.stderr)
        return 2

    request = {
        "model": model,
        "max_tokens": MAX_TOKENS,
        "system": skill_body(args.skill),
        "messages": [{"role": "user", "content": user_message(task)}],
    }
    trigger_run = "trigger" in (task.get("metadata") or {})
    loading = "catalogue" if trigger_run else os.environ.get("HO_FLAG_SKILL_LOADING") or "system"
    if loading not in ("system", "catalogue"):
        print(f"chat harness: HO_FLAG_SKILL_LOADING={loading!r}: use system or catalogue", file=sys.stderr)
        return 2
    skills = skill_catalogue(args.skill, task) if loading == "catalogue" else None
    if skills is not None:
        request.update(system=catalogue_prompt(skills), tools=[LOAD_SKILL])
    # reported: harnessopt counts which flags runs read
    flags = {"stream": os.environ.get("HO_FLAG_STREAM")}
    if trigger_run:  # what the run used: a trigger run shows the catalogue whatever the flag says
        flags["skill_loading"] = loading
    elif "HO_FLAG_SKILL_LOADING" in os.environ:
        flags["skill_loading"] = os.environ["HO_FLAG_SKILL_LOADING"]
    shown = {"skill_loading": loading} if skills is not None else {}
    log_event(args.out, "request", task_id=task.get("id"), model=model, flags_read=flags, **shown)
    stream = os.environ.get("HO_FLAG_STREAM") == "1"  # streaming keeps long generations under proxy timeouts
    try:
        response = create_message(request, stream=stream)
        if skills is not None and not trigger_run:
            response = after_load(request, response, skills, args.out, stream)
    except APIError as e:
        print(f"chat harness: {e}", file=sys.stderr)
        return 1
    content = response.get("content") or []
    answer = "".join(b.get("text", "") for b in content if b.get("type") == "text").strip()
    log_event(args.out, "response", stop_reason=response.get("stop_reason"), answer_chars=len(answer))
    (args.out / "answer.txt").write_text(answer)
    return 0


def after_load(request: dict, response: dict, skills: dict, out_dir: Path, stream: bool) -> dict:
    """A reply that called ``load_skill``: its results (the body asked for), then the answer."""
    uses = [b for b in response.get("content") or [] if b.get("type") == "tool_use"]
    if not uses:
        return response
    results = []
    for use in uses:
        name = str((use.get("input") or {}).get("name", "")).lstrip("/")
        found = skills.get(name) if use.get("name") == "load_skill" else None
        log_event(out_dir, "skill_loaded", name=name, found=bool(found))
        text = found[1] if found else f"no skill named {name!r}"
        results.append(
            {"type": "tool_result", "tool_use_id": use["id"], "content": text, "is_error": not found}
        )
    messages = [*request["messages"], {"role": "assistant", "content": response["content"]}]
    return create_message(
        {**request, "messages": [*messages, {"role": "user", "content": results}]}, stream=stream
    )


def create_message(request: dict, *, stream: bool) -> dict:
    """POST /v1/messages; the final message (a streamed one assembled from its events)."""
    base = urlsplit(os.environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com")
    body = json.dumps({**request, "stream": True} if stream else request).encode()
    headers = {
        "content-type": "application/json",
        "accept": "text/event-stream" if stream else "application/json",
        "anthropic-version": API_VERSION,
        "authorization": f"Bearer {os.environ.get('ANTHROPIC_API_KEY', '')}",  # as the SDK sends the key
    }
    path = base.path.rstrip("/") + "/v1/messages"
    for attempt in range(MAX_RETRIES + 1):
        try:
            return _post(base, path, body, headers, stream)
        except APIError as e:
            if not e.retry or attempt == MAX_RETRIES:
                raise
            time.sleep(e.wait if e.wait is not None else min(0.5 * 2**attempt, 8.0))
    raise AssertionError("unreachable")


def _post(base, path: str, body: bytes, headers: dict, stream: bool) -> dict:
    cls = http.client.HTTPSConnection if base.scheme == "https" else http.client.HTTPConnection
    conn = cls(base.hostname, base.port, timeout=TIMEOUT_S)
    try:
        try:
            conn.request("POST", path, body=body, headers=headers)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            raise APIError("APIConnectionError", None, str(e), retry=True) from e
        if resp.status >= 400:
            text = resp.read().decode("utf-8", "replace")
            should = resp.getheader("x-should-retry")
            retry = should == "true" or (
                should != "false" and (resp.status in (408, 409, 429) or resp.status >= 500)
            )
            name = ERROR_NAMES.get(
                resp.status, "InternalServerError" if resp.status >= 500 else "APIStatusError"
            )
            error = APIError(name, resp.status, text, retry)
            with contextlib.suppress(ValueError):
                error.wait = min(float(resp.getheader("retry-after") or ""), 60.0)
            raise error
        return _events(resp) if stream else json.loads(resp.read())
    finally:
        conn.close()


def _events(resp) -> dict:
    """The message a Messages event stream describes (text blocks, stop reason, usage)."""
    message: dict = {}
    event = None
    for raw in resp:
        line = raw.decode("utf-8").rstrip("\r\n")
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data = json.loads(line[5:].strip())
            kind = data.get("type", event)
            if kind == "message_start":
                message = data["message"]
                message["content"] = []
            elif kind == "content_block_start":
                message["content"].append(data["content_block"])
            elif kind == "content_block_delta" and data["delta"].get("type") == "text_delta":
                message["content"][data["index"]]["text"] += data["delta"]["text"]
            elif kind == "content_block_delta" and data["delta"].get("type") == "input_json_delta":
                block = message["content"][data["index"]]
                block["_json"] = block.get("_json", "") + data["delta"].get("partial_json", "")
            elif kind == "content_block_stop" and "_json" in message["content"][data["index"]]:
                block = message["content"][data["index"]]
                block["input"] = json.loads(block.pop("_json") or "{}")
            elif kind == "message_delta":
                message.update(data.get("delta", {}))
                message.setdefault("usage", {}).update(data.get("usage", {}))
            elif kind == "error":
                error = data.get("error", {})
                raise APIError(error.get("type", "APIError"), None, error.get("message", ""), retry=False)
    return message


if __name__ == "__main__":
    sys.exit(main())
