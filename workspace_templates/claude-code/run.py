"""Claude Code harness: the CLI headless (``claude -p``) with the skill installed as a project skill.

The skill is copied to TMP/.claude/skills/<name>/ (name from the SKILL.md front matter), the CLI
runs in TMP with the task input on stdin and ``--output-format stream-json --verbose``, and
every event it prints becomes the trajectory (OUT_DIR/trajectory.jsonl): the CLI's start (its
tools and the skills it found), each assistant text, each tool call and each tool result, and
the final result, whose text is the answer. Headless runs do not load skills reliably, so the
harness checks the transcript: a ``skill_check`` event says whether the CLI listed the skill
and whether the model loaded it (a ``Skill`` call naming it, or a read of its SKILL.md), and a
``skill_not_loaded`` event says why when it did not.

In a trigger run (a task whose ``metadata.trigger`` lists distractor skills, harnessopt's
``objective: trigger``) the distractors are installed beside the skill as project skills too, so
the model chooses among them from their descriptions as it would in a user's project.

Model calls go through the harnessopt gateway (ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY pass
through); every model the CLI may use, side calls included, is the target model, which is the
only one the gateway lets a target lease call. Tools: Bash, Read, Edit, Write, Glob, Grep and
Skill, pre-approved (the sandbox is the boundary). The image needs the CLI:
``harnessopt sandbox build --with claude-code``, rollout.image: harnessopt-sandbox:claude-code.

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

TOOLS = "Bash,Read,Edit,Write,Glob,Grep,Skill"
TEXT_CAP = 4000  # characters of a tool result or text kept per event
MAX_OUTPUT_TOKENS = 32_000  # budget.target_max_output_tokens by default: what one call of the CLI may ask


def skill_name(skill_dir: Path) -> str:
    """The front matter ``name`` of SKILL.md, else the directory name."""
    text = (skill_dir / "SKILL.md").read_text(encoding="utf-8-sig")  # a BOM is not text
    match = re.search(r"^name:\s*['\"]?([A-Za-z0-9_.-]+)", text.split("\n---", 1)[0], re.MULTILINE)
    return match.group(1) if match else skill_dir.resolve().name


class Trajectory:
    """OUT_DIR/trajectory.jsonl, one event a line, written as it happens (a killed task keeps it)."""

    def __init__(self, out_dir: Path):
        self.path = out_dir / "trajectory.jsonl"

    def log(self, kind: str, **data: object) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(
                json.dumps({"t": round(time.time(), 3), "event": kind, **data}, ensure_ascii=False) + "\n"
            )


def _cut(value: object) -> object:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return (
        text if len(text) <= TEXT_CAP else text[:TEXT_CAP] + f"... [{len(text) - TEXT_CAP} more characters]"
    )


class Transcript:
    """Reads the CLI's stream-json events into trajectory events; remembers what the skill check needs."""

    def __init__(self, traj: Trajectory, skill: str):
        self.traj, self.skill = traj, skill
        self.listed = False
        self.loaded_by: str | None = None
        self.result: dict = {}

    def take(self, event: dict) -> None:
        kind = event.get("type")
        if kind == "system" and event.get("subtype") == "init":
            skills = [str(s) for s in event.get("skills") or []]
            self.listed = self.skill in skills or self.skill in (event.get("slash_commands") or [])
            self.traj.log(
                "claude_init",
                model=event.get("model"),
                version=event.get("claude_code_version"),
                tools=event.get("tools"),
                skills=skills,
                permission_mode=event.get("permissionMode"),
            )
        elif kind in ("assistant", "user"):
            for block in (event.get("message") or {}).get("content") or []:
                if isinstance(block, dict):
                    self._block(block)
        elif kind == "result":
            self.result = event
            self.traj.log(
                "claude_result",
                subtype=event.get("subtype"),
                is_error=event.get("is_error"),
                num_turns=event.get("num_turns"),
                usage=event.get("usage"),
                permission_denials=event.get("permission_denials"),
                result=_cut(event.get("result", "")),
            )

    def _block(self, block: dict) -> None:
        kind = block.get("type")
        if kind == "text":
            self.traj.log("assistant_text", text=_cut(block.get("text", "")))
        elif kind == "tool_use":
            tool_input = block.get("input") or {}
            self.traj.log("tool_use", id=block.get("id"), name=block.get("name"), input=_cut(tool_input))
            self._note_skill(str(block.get("name")), tool_input)
        elif kind == "tool_result":
            self.traj.log(
                "tool_result",
                tool_use_id=block.get("tool_use_id"),
                is_error=bool(block.get("is_error")),
                content=_cut(block.get("content", "")),
            )

    def _note_skill(self, name: str, tool_input: dict) -> None:
        if self.loaded_by:
            return
        if name == "Skill" and str(tool_input.get("skill", "")).lstrip("/") == self.skill:
            self.loaded_by = "the Skill tool"
        elif name == "Read" and str(tool_input.get("file_path", "")).endswith(
            f"skills/{self.skill}/SKILL.md"
        ):
            self.loaded_by = "a Read of its SKILL.md"

    def check_skill(self) -> None:
        self.traj.log(
            "skill_check",
            skill=self.skill,
            listed=self.listed,
            loaded=bool(self.loaded_by),
            by=self.loaded_by,
        )
        if self.loaded_by:
            return
        why = (
            "the CLI listed it, but the model never called the Skill tool for it nor read its SKILL.md"
            if self.listed
            else "the CLI did not list it among its skills (not discovered under .claude/skills/)"
        )
        self.traj.log("skill_not_loaded", skill=self.skill, why=why)


def install_distractors(task: dict, skills_dir: Path, own: str) -> list:
    """The trigger run's distractor skills as project skills (never over the candidate)."""
    names = []
    for d in ((task.get("metadata") or {}).get("trigger") or {}).get("distractors") or []:
        name = str(d.get("name", ""))
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name == own or name in names:
            continue
        (skills_dir / name).mkdir(parents=True)
        (skills_dir / name / "SKILL.md").write_text(str(d.get("skill_md", "")))
        names.append(name)
    return names


def claude_env(home: str) -> dict:
    """The sandbox's environment, HOME in the temp dir, every model alias the target model."""
    env = {**os.environ, "HOME": home}
    if model := os.environ.get("HARNESSOPT_TARGET_MODEL"):
        for name in ("ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL", "ANTHROPIC_DEFAULT_HAIKU_MODEL"):
            env[name] = model
        for name in (
            "ANTHROPIC_DEFAULT_SONNET_MODEL",
            "ANTHROPIC_DEFAULT_OPUS_MODEL",
            "CLAUDE_CODE_SUBAGENT_MODEL",
        ):
            env[name] = model
    for name in ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "DISABLE_AUTOUPDATER", "DISABLE_TELEMETRY"):
        env[name] = "1"
    # the gateway refuses a call asking more than budget.target_max_output_tokens (32,000 unless
    # raised; raise this with it): on claude-opus-4-8 the CLI would ask 64,000
    env.setdefault("CLAUDE_CODE_MAX_OUTPUT_TOKENS", str(MAX_OUTPUT_TOKENS))
    return env


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
            "claude-code harness: the 'claude' CLI is not on PATH; build the image with "
            "`harnessopt sandbox build --with claude-code` and set rollout.image: harnessopt-sandbox:claude-code "
            "(under --sandbox local: npm install -g @anthropic-ai/claude-code on this host)",
            file=sys.stderr,
        )
        return 3
    task = json.loads(args.task.read_text())
    value = task["input"]
    prompt = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    name = skill_name(args.skill)
    traj = Trajectory(args.out)
    transcript = Transcript(traj, name)
    argv = [claude, "-p", "--output-format", "stream-json", "--verbose", "--no-session-persistence"]
    argv += ["--permission-mode", "acceptEdits", "--tools", TOOLS, "--allowedTools", TOOLS]
    if model := os.environ.get("HARNESSOPT_TARGET_MODEL"):
        argv += ["--model", model]
    with tempfile.TemporaryDirectory(prefix="ho-claude-") as tmp:
        shutil.copytree(args.skill, Path(tmp) / ".claude" / "skills" / name)
        distractors = install_distractors(task, Path(tmp) / ".claude" / "skills", name)
        traj.log("claude_start", argv=argv[1:], skill=name, distractors=distractors)
        # HOME inside the temp dir: the CLI writes its state there, and the sandbox root may be read-only.
        proc = subprocess.Popen(
            argv,
            cwd=tmp,
            env=claude_env(str(Path(tmp) / "home")),
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
                traj.log("claude_output", text=_cut(line.rstrip("\n")))
                continue
            if isinstance(event, dict):
                transcript.take(event)
        stderr = proc.stderr.read()
        returncode = proc.wait()
    sys.stderr.write(stderr[-4000:])
    transcript.check_skill()
    traj.log("claude_exit", returncode=returncode)
    result = transcript.result
    if result and result.get("is_error"):  # an API error (a refused call) says why here, not in the exit code
        print(
            f"claude-code harness: claude reported an error: {str(result.get('result', ''))[:300]}",
            file=sys.stderr,
        )
        return 1
    if returncode != 0 or not result:
        print(f"claude-code harness: claude exited with {returncode}", file=sys.stderr)
        return 1
    (args.out / "answer.txt").write_text(str(result.get("result", "")).strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
