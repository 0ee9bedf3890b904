"""Tool-agent harness: a tool-use agent in the task sandbox, on the Messages or the Chat Completions API.

The system prompt is the skill's SKILL.md body, then a short note on the working directory. The
model works in ``OUT/work`` (in the sandbox: the task's writable output directory), where
``skill/`` is the skill directory (read-only), so its ``references/`` and ``scripts/`` are
reachable by every tool. Tools, until it calls ``finish`` or runs out of turns:

* ``bash(command)``: ``bash -c`` in the working directory, inside the task sandbox (no network
  there; the model gateway's key is not in its environment), BASH_TIMEOUT_S per command, output
  capped (head and tail kept), the exit code appended
* ``read_file(path)``: a text file, relative to the working directory (``skill/references/x.md``)
  or absolute; capped at MAX_FILE_CHARS
* ``write_file(path, content)``: a file under the working directory (parents created)
* ``finish(answer)``: the final answer

Turn limit: MAX_TURNS model turns (``HO_FLAG_MAX_TURNS`` overrides); past it, or when the model
stops without ``finish``, its last text is the answer. Every model turn (``step``) and every tool
call with its input, result, error flag and time (``tool``) is appended to OUT/trajectory.jsonl.

The API is the Messages API (ANTHROPIC_BASE_URL/ANTHROPIC_API_KEY) unless the feature flag
HO_FLAG_API=chat selects the Chat Completions API (OPENAI_BASE_URL/OPENAI_API_KEY). Inside
harnessopt both point at the model gateway, which serves either API whatever the upstream. Both
flags are registered in harness/flags.yaml. The client is ``http.client``, not an SDK (whose
import costs about a second of CPU per task, docs/performance.md): each request is the body
the anthropic or openai SDK sends, retried as they retry, and an API error ends the run with
the SDK's error name (``RateLimitError``, ...).

Skills as a catalogue: with HO_FLAG_SKILL_LOADING=catalogue, and always in a trigger run (a task
whose ``metadata.trigger`` lists distractor skills, harnessopt's ``objective: trigger``), the system
prompt holds no skill body but a catalogue of skills' names and descriptions (this skill and the
distractors), and a ``load_skill(name)`` tool returns a skill's body; the agent decides from the
descriptions alone, as Claude Code does. A trigger run ends once the model called ``load_skill``
or after HO_FLAG_TRIGGER_TURNS turns (default 1): the decision is all it measures. Its
``flags_read`` says what it used (``skill_loading: catalogue``, ``max_turns`` its trigger turns),
not what HO_FLAG_SKILL_LOADING and HO_FLAG_MAX_TURNS say.

Usage: python harness/run.py --task TASK_JSON --skill SKILL_DIR --out OUT_DIR
"""

import argparse
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

MAX_TURNS = 12
MAX_TOKENS = 1024
MAX_FILE_CHARS = 20_000
MAX_OUTPUT_CHARS = 10_000  # of one bash command's output, head and tail
MAX_WRITE_BYTES = 1 << 20
BASH_TIMEOUT_S = 30
LOGGED_RESULT_CHARS = 4000  # of a tool's result, in the trajectory event
SKILL_LISTING = 40  # files of references/ and scripts/ named in the system prompt
_KEEP_ENV = ("PATH", "LANG", "LC_ALL", "TZ", "PYTHONDONTWRITEBYTECODE")
MAX_RETRIES = 2
CONNECT_TIMEOUT_S, HTTP_TIMEOUT_S = 5.0, 600.0
ANTHROPIC_VERSION = "2026-10-21"  # the anthropic-version header the anthropic SDK sends
ERROR_NAMES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    409: "ConflictError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
}

TOOLS = [
    {
        "name": "bash",
        "description": "Run a bash command in the working directory (the task sandbox); returns its output and exit code.",
        "input_schema": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
    {
        "name": "read_file",
        "description": "Read a text file, by path relative to the working directory (skill files are under skill/).",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
    {
        "name": "write_file",
        "description": "Write a text file under the working directory (parent directories are created).",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
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


LOAD_SKILL = {
    "name": "load_skill",
    "description": "Load a skill's full instructions by its name. Call it first when a request matches "
    "a skill's description in the catalogue.",
    "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
}


def _capped(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters elided ...]\n{text[-half:]}"


def run_bash(command: str, work: Path) -> tuple[str, bool]:
    """Output and exit code of ``bash -c command`` in ``work``; its own session, killed at the timeout."""
    env = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
    env.update(HOME=str(work), SKILL_DIR=str(work / "skill"))
    proc = subprocess.Popen(
        ["bash", "-c", command],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=BASH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        text = out.decode("utf-8", errors="replace")
        return _capped(text, MAX_OUTPUT_CHARS) + f"\n[timed out after {BASH_TIMEOUT_S} s]", True
    text = _capped(out.decode("utf-8", errors="replace").rstrip("\n"), MAX_OUTPUT_CHARS)
    return f"{text}\n[exit code {proc.returncode}]", proc.returncode != 0


def _inside(work: Path, rel: str) -> Path:
    path = (work / rel).resolve()
    if not path.is_relative_to(work.resolve()):
        raise ValueError(f"{rel} is outside the working directory")
    return path


def read_file(work: Path, rel: str) -> str:
    path = (work / rel).resolve() if not Path(rel).is_absolute() else Path(rel)
    if not path.is_file():
        raise ValueError(f"no such file: {rel}")
    text = path.read_text(errors="replace")
    return text if len(text) <= MAX_FILE_CHARS else text[:MAX_FILE_CHARS] + "\n[... truncated]"


def write_file(work: Path, rel: str, content: str) -> str:
    data = content.encode()
    if len(data) > MAX_WRITE_BYTES:
        raise ValueError(f"content is {len(data)} bytes; at most {MAX_WRITE_BYTES}")
    if Path(os.path.normpath(work / rel)).is_relative_to(work / "skill"):
        raise ValueError("skill/ is read-only")
    path = _inside(work, rel)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return f"wrote {len(data)} bytes to {rel}"


def run_tool(name: str, args: dict, work: Path) -> tuple[str, bool]:
    """(result text, is_error) of one tool call other than finish."""
    try:
        if name == "bash":
            return run_bash(str(args.get("command", "")), work)
        if name == "read_file":
            return read_file(work, str(args.get("path", ""))), False
        if name == "write_file":
            return write_file(work, str(args.get("path", "")), str(args.get("content", ""))), False
        return f"unknown tool {name!r}; the tools are bash, read_file, write_file, finish", True
    except (ValueError, OSError) as e:
        return f"{type(e).__name__}: {e}", True


def skill_body(skill_dir: Path) -> str:
    text = (skill_dir / "SKILL.md").read_text(encoding="utf-8-sig")  # a BOM is not text
    if text.startswith("---"):
        end = text.find("\n---", 3)
        if end != -1:
            text = text[end + 4 :]
    return text.strip()


def front_matter(text: str) -> dict:
    """``name`` and ``description`` of a SKILL.md text (simple ``key: value`` lines, folded ones joined)."""
    meta: dict = {}
    if not text.startswith("---"):
        return meta
    end = text.find("\n---", 3)
    key = None
    for line in text[3 : end if end != -1 else None].splitlines():
        if line[:1] not in (" ", "\t") and ":" in line:
            key, value = (x.strip() for x in line.split(":", 1))
            meta[key] = value.strip("'\"") if value not in (">", "|", ">-", "|-") else ""
        elif key and line.strip():
            meta[key] = (meta[key] + " " + line.strip()).strip()
    return meta


def skill_catalogue(skill_dir: Path, task: dict) -> dict:
    """name -> (description, body) of this skill and the trigger run's distractors."""
    own = (skill_dir / "SKILL.md").read_text(encoding="utf-8-sig")  # a BOM is not text
    meta = front_matter(own)
    skills = {meta.get("name") or skill_dir.name: (meta.get("description", ""), skill_body(skill_dir))}
    for d in ((task.get("metadata") or {}).get("trigger") or {}).get("distractors") or []:
        text = str(d.get("skill_md", ""))
        end = text.find("\n---", 3) if text.startswith("---") else -1
        skills.setdefault(str(d.get("name")), (str(d.get("description", "")), text[end + 4 :].strip()))
    return skills


def catalogue_prompt(skills: dict) -> str:
    """The system prompt of catalogue mode: the skills' names and descriptions, no body."""
    listing = "".join(f"\n- {name}: {desc}" for name, (desc, _) in sorted(skills.items()))
    return (
        "You are a helpful agent. These skills are available; when a request matches a skill's "
        f"description, call load_skill with its name before anything else:{listing}\n\n"
        "You have the tools bash, read_file, write_file, load_skill and finish. Call finish with the "
        "final answer when done."
    )


def system_prompt(skill_dir: Path) -> str:
    """SKILL.md's body, then where the tools work and which skill files they can reach."""
    files = sorted(
        str(p.relative_to(skill_dir))
        for sub in ("references", "scripts")
        for p in (skill_dir / sub).rglob("*")
        if p.is_file()
    )
    listing = "".join(f"\n- skill/{f}" for f in files[:SKILL_LISTING]) or " (none)"
    more = f"\n- ... {len(files) - SKILL_LISTING} more" if len(files) > SKILL_LISTING else ""
    return (
        f"{skill_body(skill_dir)}\n\n## Your environment\n\nYou have the tools bash, read_file, "
        "write_file and finish. They work in your working directory, where `skill/` holds this "
        f"skill's files (read-only):{listing}{more}\nCall finish with the final answer when done."
    )


def log_event(out_dir: Path, kind: str, **data: object) -> None:
    with open(out_dir / "trajectory.jsonl", "a") as f:
        f.write(json.dumps({"t": round(time.time(), 3), "event": kind, **data}, default=str) + "\n")


class APIError(Exception):
    """An error answer of the API (or no answer), named like the SDKs' errors."""

    def __init__(self, name: str, status: int | None, body: str, retry: bool):
        super().__init__(f"{name}: {status or ''} {body[:2000]}".strip())
        self.name, self.status, self.retry = name, status, retry
        self.wait: float | None = None  # the server's retry-after, in seconds


class HTTPConversation:
    """One conversation's POSTs to ``BASE + PATH`` over ``http.client``, retried as the SDKs do:
    twice, on 408, 409, 429, 5xx, timeouts and lost connections, ``x-should-retry`` obeyed, the
    server's ``retry-after-ms``/``retry-after`` waited (up to ``max_wait``; the SDKs' exponential
    backoff without it)."""

    max_wait: float | None = None  # a longer retry-after: not retried

    def __init__(self, base_url: str, path: str, headers: dict):
        self.base = urlsplit(base_url)
        self.path = self.base.path.rstrip("/") + path
        self.headers = {"content-type": "application/json", "accept": "application/json", **headers}

    def post(self, body: dict) -> dict:
        data = json.dumps(body).encode()
        for attempt in range(MAX_RETRIES + 1):
            try:
                return self._post(data)
            except APIError as e:
                if not e.retry or attempt == MAX_RETRIES:
                    raise
                backoff = min(0.5 * 2**attempt, 8.0) * (1 - 0.25 * random.random())
                time.sleep(e.wait if e.wait is not None and e.wait > 0 else backoff)
        raise AssertionError("unreachable")

    def _post(self, data: bytes) -> dict:
        cls = http.client.HTTPSConnection if self.base.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.base.hostname, self.base.port, timeout=CONNECT_TIMEOUT_S)
        try:
            conn.connect()
            conn.sock.settimeout(HTTP_TIMEOUT_S)
            conn.request("POST", self.path, body=data, headers=self.headers)
            resp = conn.getresponse()
            if resp.status >= 400:
                raise self._status_error(resp)
            return json.loads(resp.read())
        except TimeoutError as e:
            raise APIError("APITimeoutError", None, "Request timed out.", retry=True) from e
        except (OSError, http.client.HTTPException) as e:
            raise APIError("APIConnectionError", None, str(e), retry=True) from e
        finally:
            conn.close()

    def _status_error(self, resp) -> APIError:
        text = resp.read().decode("utf-8", "replace")
        wait = _retry_after(resp)
        should = resp.getheader("x-should-retry")
        retry = (wait is None or self.max_wait is None or wait <= self.max_wait) and (
            should == "true" or (should != "false" and (resp.status in (408, 409, 429) or resp.status >= 500))
        )
        name = ERROR_NAMES.get(resp.status, "InternalServerError" if resp.status >= 500 else "APIStatusError")
        error = APIError(name, resp.status, text, retry)
        error.wait = wait if self.max_wait is None or wait is None else min(wait, self.max_wait)
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


def _without_none(block: dict) -> dict:
    return {k: v for k, v in block.items() if v is not None}


class MessagesAPI(HTTPConversation):
    """One conversation on the Messages API (ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY)."""

    def __init__(self, model: str, system: str, user: str, tools: list = TOOLS):
        self.tools = tools
        key = os.environ.get("ANTHROPIC_API_KEY") or os.environ.get("ANTHROPIC_AUTH_TOKEN")
        if not key:
            raise APIError("AnthropicError", None, "ANTHROPIC_API_KEY is not set", retry=False)
        base = os.environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"
        auth = {"authorization": f"Bearer {key}"}  # as the SDK sends the key (and an auth token)
        super().__init__(base, "/v1/messages", {"anthropic-version": ANTHROPIC_VERSION, **auth})
        self.model, self.system = model, system
        self.messages: list[dict] = [{"role": "user", "content": user}]

    def step(self) -> tuple[str, list[tuple[str, str, dict]], str]:
        """(text, [(call id, tool name, input)], stop reason) of one model turn."""
        response = self.post(
            {
                "max_tokens": MAX_TOKENS,
                "messages": self.messages,
                "model": self.model,
                "system": self.system,
                "tools": self.tools,
            }
        )
        content = [_without_none(b) for b in response.get("content") or []]
        self.messages.append({"role": "assistant", "content": content})
        text = "".join(b.get("text", "") for b in content if b.get("type") == "text").strip()
        calls = [(b["id"], b["name"], dict(b["input"])) for b in content if b.get("type") == "tool_use"]
        return text, calls, str(response.get("stop_reason"))

    def results(self, results: list[tuple[str, str, bool]]) -> None:
        blocks = [
            {"type": "tool_result", "tool_use_id": i, "content": t, "is_error": e} for i, t, e in results
        ]
        self.messages.append({"role": "user", "content": blocks})


class ChatAPI(HTTPConversation):
    """One conversation on the Chat Completions API (OPENAI_BASE_URL, OPENAI_API_KEY)."""

    max_wait = 120.0

    def __init__(self, model: str, system: str, user: str, tools: list = TOOLS):
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
        key = os.environ.get("OPENAI_API_KEY")
        if not key:
            raise APIError("OpenAIError", None, "OPENAI_API_KEY is not set", retry=False)
        base = os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        super().__init__(base, "/chat/completions", {"authorization": f"Bearer {key}"})
        self.model = model
        self.messages: list[dict] = [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def step(self) -> tuple[str, list[tuple[str, str, dict]], str]:
        response = self.post(
            {"max_tokens": MAX_TOKENS, "messages": self.messages, "model": self.model, "tools": self.tools}
        )
        choice = response["choices"][0]
        message = choice.get("message") or {}
        reply: dict = {"role": "assistant", "content": message.get("content")}
        calls = []
        for call in message.get("tool_calls") or []:
            fn = call.get("function") or {}
            name, arguments = fn.get("name"), fn.get("arguments")
            reply.setdefault("tool_calls", []).append(
                {"id": call["id"], "type": "function", "function": {"name": name, "arguments": arguments}}
            )
            try:
                args = json.loads(arguments or "{}")
            except ValueError:
                args = None  # the model wrote arguments that are not JSON: said so in the result
            calls.append((call["id"], name, args if isinstance(args, dict) else {"_invalid": arguments}))
        self.messages.append(reply)
        return (message.get("content") or "").strip(), calls, str(choice.get("finish_reason"))

    def results(self, results: list[tuple[str, str, bool]]) -> None:
        for call_id, text, is_error in results:
            self.messages.append(
                {"role": "tool", "tool_call_id": call_id, "content": f"Error: {text}" if is_error else text}
            )


def open_api(api_name: str, model: str, system: str, user: str, tools: list = TOOLS):
    """The conversation for HO_FLAG_API (``messages`` or ``chat``); None for another name."""
    apis = {"messages": MessagesAPI, "chat": ChatAPI}
    return apis[api_name](model, system, user, tools) if api_name in apis else None


def agent_loop(api, out_dir: Path, work: Path, max_turns: int, skills=None, stop_on_load=False) -> str:
    """Model turns until ``finish``, a turn without tool calls, or ``max_turns``; returns the answer.
    ``skills``: the catalogue ``load_skill`` reads; ``stop_on_load``: a trigger run ends at a load."""
    last_text = ""
    for step in range(1, max_turns + 1):
        text, calls, stop_reason = api.step()
        last_text = text or last_text
        log_event(
            out_dir,
            "step",
            step=step,
            stop_reason=stop_reason,
            text=text[:2000],
            tools=[n for _, n, _ in calls],
        )
        if not calls:
            return last_text
        results = []
        for call_id, name, args in calls:
            if name == "finish":
                log_event(out_dir, "finish", step=step, answer=str(args.get("answer", ""))[:2000])
                return str(args.get("answer", "")).strip()
            started = time.monotonic()
            if "_invalid" in args:
                out, is_error = f"arguments are not a JSON object: {args['_invalid']!r}", True
            elif name == "load_skill" and skills is not None:
                wanted = str(args.get("name", "")).lstrip("/")
                found = skills.get(wanted)
                out, is_error = (found[1], False) if found else (f"no skill named {wanted!r}", True)
                log_event(out_dir, "skill_loaded", step=step, name=wanted, found=bool(found))
                if found and stop_on_load:
                    return f"loaded skill {wanted}"
            else:
                out, is_error = run_tool(name, args, work)
            wall = round(time.monotonic() - started, 3)
            result = _capped(out, LOGGED_RESULT_CHARS)
            log_event(
                out_dir,
                "tool",
                step=step,
                name=name,
                input=args,
                is_error=is_error,
                result=result,
                wall_s=wall,
            )
            results.append((call_id, out, is_error))
        api.results(results)
    log_event(out_dir, "max_turns", turns=max_turns)
    return last_text


def _trigger_turns() -> int:
    raw = os.environ.get("HO_FLAG_TRIGGER_TURNS") or ""
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


def _max_turns() -> int:
    raw = os.environ.get("HO_FLAG_MAX_TURNS") or ""
    return int(raw) if raw.isdigit() and int(raw) > 0 else MAX_TURNS


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
    work = args.out / "work"
    work.mkdir(exist_ok=True)
    if not (work / "skill").exists():
        (work / "skill").symlink_to(args.skill.resolve(), target_is_directory=True)

    value = task["input"]
    user = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    api_name = os.environ.get("HO_FLAG_API") or "messages"
    max_turns = _max_turns()
    trigger_run = "trigger" in (task.get("metadata") or {})
    loading = "catalogue" if trigger_run else os.environ.get("HO_FLAG_SKILL_LOADING") or "system"
    if loading not in ("system", "catalogue"):
        print(
            f"tool-agent harness: HO_FLAG_SKILL_LOADING={loading!r}: use system or catalogue", file=sys.stderr
        )
        return 2
    if trigger_run:
        max_turns = _trigger_turns()
    names = ("API", "MAX_TURNS", "SKILL_LOADING") + (("TRIGGER_TURNS",) if trigger_run else ())
    read = {name.lower(): os.environ.get(f"HO_FLAG_{name}") for name in names}
    if trigger_run:  # what the run used, not the flags a trigger run overrides
        read.update(skill_loading=loading, max_turns=str(max_turns))
    log_event(args.out, "start", api=api_name, max_turns=max_turns, skill_loading=loading, flags_read=read)
    skills = skill_catalogue(args.skill, task) if loading == "catalogue" else None
    system = catalogue_prompt(skills) if skills is not None else system_prompt(args.skill)
    tools = [*TOOLS, LOAD_SKILL] if skills is not None else TOOLS
    try:
        api = open_api(api_name, model, system, user, tools)
        if api is None:
            print(f"tool-agent harness: HO_FLAG_API={api_name!r}: use messages or chat", file=sys.stderr)
            return 2
        answer = agent_loop(api, args.out, work, max_turns, skills, stop_on_load=trigger_run)
    except APIError as e:
        print(f"tool-agent harness: {e}", file=sys.stderr)
        return 1
    finally:  # a link left in OUT would be reported as skipped output of every task
        (work / "skill").unlink(missing_ok=True)
    (args.out / "answer.txt").write_text(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
