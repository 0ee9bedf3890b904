"""Chat harness on the Chat Completions API: one request per task, on the standard library alone.

The skill body (SKILL.md without its front matter) is the system message, the task input is the
user message, and the reply text, stripped, is the answer. The model comes from
HARNESSOPT_TARGET_MODEL; the endpoint and key from OPENAI_BASE_URL and OPENAI_API_KEY (inside
harnessopt these point at the model gateway with a per-run token; the gateway forwards to
whichever upstream model.provider names, translating when it is not an OpenAI-compatible one).
The request (body, path, ``Authorization: Bearer``) is the one the openai SDK sends; the client
is ``http.client``, because importing the SDK costs about a second of CPU per task
(docs/performance.md). Like the SDK it retries twice on 408, 409, 429, 5xx, timeouts and lost
connections (``x-should-retry``, ``retry-after-ms`` and ``retry-after`` honoured), and an API
error ends the run with the SDK's error name (``AuthenticationError``, ...). The
``openai-chat-sdk`` template is this harness on the SDK. With the feature flag HO_FLAG_STREAM=1
(``flags: {stream: "1"}`` in harnessopt.yaml) the request is streamed (SSE).

Usage: python harness/run.py --task TASK_JSON --skill SKILL_DIR --out OUT_DIR
"""

import argparse
import http.client
import json
import os
import random
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

MAX_TOKENS = 1024
MAX_RETRIES = 2
CONNECT_TIMEOUT_S, TIMEOUT_S = 5.0, 600.0
MAX_RETRY_AFTER_S = 120.0  # a longer retry-after is not waited for (the SDK's rule)
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
        print("openai-chat harness: HARNESSOPT_TARGET_MODEL is not set", file=sys.stderr)
        return 2
    if not os.environ.get("OPENAI_API_KEY"):  # the SDK refuses to build a client without one
        print("openai-chat harness: OpenAIError: OPENAI_API_KEY is not set", file=sys.stderr)
        return 1

    request = {
        "model": model,
        "max_tokens": MAX_TOKENS,
        "messages": [
            {"role": "system", "content": skill_body(args.skill)},
            {"role": "user", "content": user_message(task)},
        ],
    }
    flags = {"stream": os.environ.get("HO_FLAG_STREAM")}  # reported: harnessopt counts which flags runs read
    log_event(args.out, "request", task_id=task.get("id"), model=model, flags_read=flags)
    stream = os.environ.get("HO_FLAG_STREAM") == "1"  # streaming keeps long generations under proxy timeouts
    try:
        answer, finish = create_completion(request, stream=stream)
    except APIError as e:
        print(f"openai-chat harness: {e}", file=sys.stderr)
        return 1
    answer = answer.strip()
    log_event(args.out, "response", stop_reason=finish, answer_chars=len(answer))
    (args.out / "answer.txt").write_text(answer)
    return 0


def create_completion(request: dict, *, stream: bool) -> tuple[str, str | None]:
    """POST {OPENAI_BASE_URL}/chat/completions; (reply text, finish reason), a stream assembled."""
    base = urlsplit(os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1")
    body = json.dumps({**request, "stream": True} if stream else request).encode()
    headers = {
        "content-type": "application/json",
        "accept": "application/json",
        "authorization": f"Bearer {os.environ.get('OPENAI_API_KEY', '')}",
    }
    for name, header in (("OPENAI_ORG_ID", "openai-organization"), ("OPENAI_PROJECT_ID", "openai-project")):
        if os.environ.get(name):
            headers[header] = os.environ[name]
    path = base.path.rstrip("/") + "/chat/completions"
    for attempt in range(MAX_RETRIES + 1):
        try:
            return _post(base, path, body, headers, stream)
        except APIError as e:
            if not e.retry or attempt == MAX_RETRIES:
                raise
            backoff = min(0.5 * 2**attempt, 8.0) * (1 - 0.25 * random.random())
            time.sleep(e.wait if e.wait is not None and 0 < e.wait <= MAX_RETRY_AFTER_S else backoff)
    raise AssertionError("unreachable")


def _post(base, path: str, body: bytes, headers: dict, stream: bool) -> tuple[str, str | None]:
    cls = http.client.HTTPSConnection if base.scheme == "https" else http.client.HTTPConnection
    conn = cls(base.hostname, base.port, timeout=CONNECT_TIMEOUT_S)
    try:
        try:
            conn.connect()
            conn.sock.settimeout(TIMEOUT_S)
            conn.request("POST", path, body=body, headers=headers)
            resp = conn.getresponse()
            if resp.status >= 400:
                raise _status_error(resp)
            if not stream:
                return _completion(json.loads(resp.read()))
        except TimeoutError as e:
            raise APIError("APITimeoutError", None, "Request timed out.", retry=True) from e
        except (OSError, http.client.HTTPException) as e:
            raise APIError("APIConnectionError", None, str(e), retry=True) from e
        try:  # a stream cut short is not asked for again (the SDK neither): it may be billed already
            return _chunks(resp)
        except (OSError, http.client.HTTPException) as e:
            raise APIError("APIConnectionError", None, str(e), retry=False) from e
    finally:
        conn.close()


def _status_error(resp) -> APIError:
    text = resp.read().decode("utf-8", "replace")
    wait = _retry_after(resp)
    should = resp.getheader("x-should-retry")
    retry = (wait is None or wait <= MAX_RETRY_AFTER_S) and (
        should == "true" or (should != "false" and (resp.status in (408, 409, 429) or resp.status >= 500))
    )
    name = ERROR_NAMES.get(resp.status, "InternalServerError" if resp.status >= 500 else "APIStatusError")
    error = APIError(name, resp.status, text, retry)
    error.wait = wait
    return error


def _retry_after(resp) -> float | None:
    """Seconds the server asks to wait: retry-after-ms, else retry-after (seconds or an HTTP date)."""
    for header, divisor in (("retry-after-ms", 1000), ("retry-after", 1)):
        try:
            return float(resp.getheader(header) or "") / divisor
        except ValueError:
            pass
    if date := resp.getheader("retry-after"):
        from email.utils import parsedate_to_datetime

        try:
            return parsedate_to_datetime(date).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return None


def _completion(data: dict) -> tuple[str, str | None]:
    choice = data["choices"][0]
    return choice["message"].get("content") or "", choice.get("finish_reason")


def _chunks(resp) -> tuple[str, str | None]:
    """The reply text and finish reason a Chat Completions event stream carries."""
    parts, finish = [], None
    for raw in resp:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data.startswith("[DONE]"):
            break
        chunk = json.loads(data)
        if chunk.get("error"):
            error = chunk["error"]
            message = error.get("message", "") if isinstance(error, dict) else str(error)
            raise APIError("APIError", None, message, retry=False)
        for choice in chunk.get("choices") or []:
            parts.append((choice.get("delta") or {}).get("content") or "")
            finish = choice.get("finish_reason") or finish
    return "".join(parts), finish


if __name__ == "__main__":
    sys.exit(main())
