"""Chat harness on the anthropic SDK: one Messages API request per task.

The `chat` template makes the same request with the standard library (no SDK import, about a
second less CPU per task); this variant is for harnesses that build on the SDK.

The skill body (SKILL.md without its front matter) is the system prompt, the task input is the
user message, and the reply text, stripped, is the answer. The model comes from
HARNESSOPT_TARGET_MODEL; the SDK reads ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY (inside
harnessopt these point at the model gateway with a per-run token). With the feature flag
HO_FLAG_STREAM=1 (``flags: {stream: "1"}`` in harnessopt.yaml) the request is streamed (SSE).

Usage: python harness/run.py --task TASK_JSON --skill SKILL_DIR --out OUT_DIR
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

MAX_TOKENS = 1024


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
        print("chat harness: HARNESSOPT_TARGET_MODEL is not set", file=sys.stderr)
        return 2

    # Imported late: the SDK is the slowest part of startup; see docs/models.md for the figures.
    from anthropic import Anthropic

    client = Anthropic(max_retries=2)
    request = {
        "model": model,
        "max_tokens": MAX_TOKENS,
        "system": skill_body(args.skill),
        "messages": [{"role": "user", "content": user_message(task)}],
    }
    flags = {"stream": os.environ.get("HO_FLAG_STREAM")}  # reported: harnessopt counts which flags runs read
    log_event(args.out, "request", task_id=task.get("id"), model=model, flags_read=flags)
    if os.environ.get("HO_FLAG_STREAM") == "1":  # streaming keeps long generations under proxy timeouts
        with client.messages.stream(**request) as stream:
            response = stream.get_final_message()
    else:
        response = client.messages.create(**request)
    answer = "".join(block.text for block in response.content if block.type == "text").strip()
    log_event(args.out, "response", stop_reason=response.stop_reason, answer_chars=len(answer))
    (args.out / "answer.txt").write_text(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
