"""Codex harness: the Codex CLI non-interactively (``codex exec --json``) with the skill installed as a user skill.

The skill is copied to TMP/home/.codex/skills/<name>/ (CODEX_HOME/skills, where Codex looks for
user skills; name from the SKILL.md front matter). Codex runs in TMP with the task input as its
prompt, pointed at the harnessopt gateway's Responses API by a config.toml ``model_provider``
(``base_url`` = OPENAI_BASE_URL, ``wire_api = "responses"``, the key from OPENAI_API_KEY). Every
event it prints becomes the trajectory (OUT_DIR/trajectory.jsonl): each command it ran with its
output, each message, the turn's usage; its own session log (every model turn, tool call and
result as the Responses API items it sent) is kept as OUT_DIR/codex_session.jsonl. The last
agent message is the answer. A ``skill_check`` event says whether Codex listed the skill (it
names its skills to the model in the session's developer message) and whether the model loaded
it (a command that read its SKILL.md); ``skill_not_loaded`` says why when it did not.

Codex's own sandbox is off (the harnessopt sandbox is the boundary), and so are its features
that need OpenAI's servers or stored state (web search, multi-agent, goals): the gateway refuses
hosted tools. The image needs the CLI: ``harnessopt sandbox build --with codex``,
rollout.image: harnessopt-sandbox:codex.

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

TEXT_CAP = 4000  # characters of a command output or message kept per event
FLAGS = ["--disable", "multi_agent", "--disable", "goals", "-c", 'web_search="disabled"']


def skill_name(skill_dir: Path) -> str:
    """The front matter ``name`` of SKILL.md, else the directory name."""
    text = (skill_dir / "SKILL.md").read_text(encoding="utf-8-sig")  # a BOM is not text
    match = re.search(r"^name:\s*['\"]?([A-Za-z0-9_.-]+)", text.split("\n---", 1)[0], re.MULTILINE)
    return match.group(1) if match else skill_dir.resolve().name


def _cut(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return (
        text if len(text) <= TEXT_CAP else text[:TEXT_CAP] + f"... [{len(text) - TEXT_CAP} more characters]"
    )


class Trajectory:
    """OUT_DIR/trajectory.jsonl, one event a line, written as it happens (a killed task keeps it)."""

    def __init__(self, out_dir: Path):
        self.path = out_dir / "trajectory.jsonl"

    def log(self, kind: str, **data: object) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(
                json.dumps({"t": round(time.time(), 3), "event": kind, **data}, ensure_ascii=False) + "\n"
            )


class Transcript:
    """Reads ``codex exec --json`` events into trajectory events; remembers the answer and the skill's use."""

    def __init__(self, traj: Trajectory, skill: str):
        self.traj, self.skill = traj, skill
        self.loaded_by: str | None = None
        self.answer: str | None = None
        self.error: str | None = None

    def take(self, event: dict) -> None:
        kind = event.get("type")
        item = event.get("item") or {}
        if kind == "item.completed" and item.get("type") == "command_execution":
            command = str(item.get("command", ""))
            self.traj.log("tool_use", id=item.get("id"), name="exec_command", input=_cut(command))
            self.traj.log(
                "tool_result",
                tool_use_id=item.get("id"),
                exit_code=item.get("exit_code"),
                is_error=item.get("exit_code") not in (0, None),
                content=_cut(item.get("aggregated_output", "")),
            )
            if not self.loaded_by and f"{self.skill}/SKILL.md" in command:
                self.loaded_by = "a command that read its SKILL.md"
        elif kind == "item.completed" and item.get("type") == "agent_message":
            self.answer = str(item.get("text", ""))
            self.traj.log("assistant_text", text=_cut(self.answer))
        elif kind == "item.completed" and item.get("type") == "reasoning":
            self.traj.log("reasoning", text=_cut(item.get("text", "")))
        elif kind == "item.completed":
            self.traj.log("codex_item", item=_cut(item))
        elif kind in ("turn.completed", "thread.started"):
            self.traj.log(kind.replace(".", "_"), **{k: v for k, v in event.items() if k != "type"})
        elif kind in ("turn.failed", "error"):
            self.error = str((event.get("error") or {}).get("message") or event.get("message") or "")
            self.traj.log("codex_error", message=_cut(self.error))

    def check_skill(self, session: str) -> None:
        listed = f"- {self.skill}:" in session  # the skills list of the developer message
        self.traj.log(
            "skill_check", skill=self.skill, listed=listed, loaded=bool(self.loaded_by), by=self.loaded_by
        )
        if self.loaded_by:
            return
        why = (
            "Codex listed it, but the model never read its SKILL.md"
            if listed
            else "Codex did not list it among its skills (not discovered under CODEX_HOME/skills/)"
        )
        self.traj.log("skill_not_loaded", skill=self.skill, why=why)


def write_config(codex_home: Path, model: str) -> None:
    """config.toml: the gateway as the one model provider, Responses API, few retries."""
    base_url = os.environ.get("OPENAI_BASE_URL") or (os.environ.get("ANTHROPIC_BASE_URL", "") + "/v1")
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        f"model = {json.dumps(model)}\n"
        'model_provider = "harnessopt"\n'
        "[model_providers.harnessopt]\n"
        'name = "harnessopt gateway"\n'
        f"base_url = {json.dumps(base_url)}\n"
        'env_key = "OPENAI_API_KEY"\n'
        'wire_api = "responses"\n'
        "request_max_retries = 1\n"
        "stream_max_retries = 1\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", type=Path, required=True)
    parser.add_argument("--skill", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    codex = shutil.which("codex")
    if codex is None:
        print(
            "codex harness: the 'codex' CLI is not on PATH; build the image with `harnessopt sandbox build "
            "--with codex` and set rollout.image: harnessopt-sandbox:codex (under --sandbox local: "
            "npm install -g @openai/codex on this host)",
            file=sys.stderr,
        )
        return 3
    task = json.loads(args.task.read_text())
    value = task["input"]
    prompt = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    name = skill_name(args.skill)
    model = os.environ.get("HARNESSOPT_TARGET_MODEL", "gpt-5")
    traj = Trajectory(args.out)
    transcript = Transcript(traj, name)
    argv = [codex, "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
    argv += [*FLAGS, "-m", model, "-"]
    with tempfile.TemporaryDirectory(prefix="ho-codex-") as tmp:
        home = Path(tmp) / "home"
        codex_home = home / ".codex"
        write_config(codex_home, model)
        shutil.copytree(args.skill, codex_home / "skills" / name)
        work = Path(tmp) / "work"
        work.mkdir()
        traj.log("codex_start", argv=argv[1:], skill=name, model=model)
        env = {**os.environ, "HOME": str(home), "CODEX_HOME": str(codex_home), "NO_COLOR": "1"}
        proc = subprocess.Popen(
            argv,
            cwd=work,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        proc.stdin.write(prompt)
        proc.stdin.close()
        for line in proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                traj.log("codex_output", text=_cut(line.rstrip("\n")))
                continue
            if isinstance(event, dict):
                transcript.take(event)
        stderr = proc.stderr.read()
        returncode = proc.wait()
        logs = sorted((codex_home / "sessions").rglob("*.jsonl"))
        session = "".join(p.read_text(errors="replace") for p in logs)
        (args.out / "codex_session.jsonl").write_text(session)
    sys.stderr.write(stderr[-4000:])
    transcript.check_skill(session)
    traj.log("codex_exit", returncode=returncode)
    if returncode != 0 or transcript.answer is None:
        why = transcript.error or f"codex exited with {returncode}"
        print(f"codex harness: {why[:500]}", file=sys.stderr)
        return 1
    (args.out / "answer.txt").write_text(transcript.answer.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
