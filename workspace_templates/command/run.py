"""Command harness: runs the program named in harness/command.yaml on each task.

``argv`` may use {task}, {skill}, {out} and {harness}. The program writes OUT/answer.txt itself,
or its stdout (stripped) becomes the answer. Its exit code is passed on. The environment
(HARNESSOPT_TARGET_MODEL, ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY, HO_FLAG_*) is inherited.

Usage: python harness/run.py --task TASK_JSON --skill SKILL_DIR --out OUT_DIR
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load_argv(path: Path) -> list[str]:
    """``argv`` from command.yaml: a flow list (JSON syntax) or a block list of ``- item`` lines."""
    try:
        import yaml  # not every sandbox image has PyYAML; the fallback reads the two list forms

        argv = (yaml.safe_load(path.read_text()) or {}).get("argv")
    except ImportError:
        argv = _parse_argv(path.read_text())
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError(f"{path}: 'argv' must be a non-empty list of strings")
    return argv


def _parse_argv(text: str) -> list[str] | None:
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    for i, line in enumerate(lines):
        if line.startswith("argv:"):
            rest = line[5:].strip()
            if rest:
                return json.loads(rest)
            items = []
            for item in lines[i + 1 :]:
                if not item.lstrip().startswith("- "):
                    break
                value = item.lstrip()[2:].strip()
                items.append(json.loads(value) if value.startswith('"') else value.strip("'"))
            return items
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", type=Path, required=True)
    parser.add_argument("--skill", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        template = load_argv(HERE / "command.yaml")
    except (OSError, ValueError) as e:
        print(f"command harness: {e}", file=sys.stderr)
        return 2
    values = {"task": str(args.task), "skill": str(args.skill), "out": str(args.out), "harness": str(HERE)}
    argv = [part.format(**values) for part in template]
    started = time.time()
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, text=True)
    except OSError as e:
        print(f"command harness: cannot run {argv[0]}: {e}", file=sys.stderr)
        return 127
    with open(args.out / "trajectory.jsonl", "a") as f:
        event = {"t": round(started, 3), "event": "command", "argv": argv, "returncode": proc.returncode}
        f.write(json.dumps(event) + "\n")
    answer_file = args.out / "answer.txt"
    if proc.returncode == 0 and not answer_file.exists():
        answer_file.write_text(proc.stdout.strip())
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
