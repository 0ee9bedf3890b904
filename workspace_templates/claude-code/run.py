"""Claude Code harness: runs ``claude -p`` headless with the skill installed as a project skill.

The skill is copied to TMP/.claude/skills/<name>/ (name from the SKILL.md front matter), the
CLI runs in TMP with the task input as its prompt, and the ``result`` of its JSON output is the
answer. ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY pass through, so its model calls go through the
harnessopt gateway. The sandbox image must have the ``claude`` CLI on PATH.

Usage: python harness/run.py --task TASK_JSON --skill SKILL_DIR --out OUT_DIR
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TIMEOUT_S = 600


def skill_name(skill_dir: Path) -> str:
    """The front matter ``name`` of SKILL.md, else the directory name."""
    text = (skill_dir / "SKILL.md").read_text()
    match = re.search(r"^name:\s*['\"]?([A-Za-z0-9_.-]+)", text.split("\n---", 1)[0], re.MULTILINE)
    return match.group(1) if match else skill_dir.resolve().name


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
    claude = shutil.which("claude")
    if claude is None:
        print(
            "claude-code harness: the 'claude' CLI is not on PATH; install Claude Code in the sandbox image",
            file=sys.stderr,
        )
        return 3
    task = json.loads(args.task.read_text())
    value = task["input"]
    prompt = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    with tempfile.TemporaryDirectory(prefix="ho-claude-") as tmp:
        shutil.copytree(args.skill, Path(tmp) / ".claude" / "skills" / skill_name(args.skill))
        argv = [claude, "-p", prompt, "--output-format", "json"]
        if model := os.environ.get("HARNESSOPT_TARGET_MODEL"):
            argv += ["--model", model]
        log_event(args.out, "claude_start", argv=argv[:1] + argv[3:])
        # HOME inside the temp dir: the CLI writes its state there, and the sandbox root may be read-only.
        env = {**os.environ, "HOME": tmp}
        proc = subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    (args.out / "claude_stdout.json").write_text(proc.stdout)
    sys.stderr.write(proc.stderr[-4000:])
    log_event(args.out, "claude_exit", returncode=proc.returncode)
    if proc.returncode != 0:
        print(f"claude-code harness: claude exited with {proc.returncode}", file=sys.stderr)
        return 1
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        print("claude-code harness: claude printed no JSON result", file=sys.stderr)
        return 1
    if result.get("is_error"):
        print(
            f"claude-code harness: claude reported an error: {result.get('result', '')[:300]}",
            file=sys.stderr,
        )
        return 1
    (args.out / "answer.txt").write_text(str(result.get("result", "")).strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
