"""Creating and opening a workspace: harnessopt.yaml, skill/, harness/, scorer.py, tasks/, the
git repository and its state directory (the layout: docs/workspace.md)."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git
import yaml

from harnessopt.config import CONFIG_NAME, Config, apply_overrides, dump_config, load_config, yaml_value
from harnessopt.errors import UserError
from harnessopt.ledger import store as ledger
from harnessopt.ledger import vcs
from harnessopt.ledger.journal import STATE_DIR, Journal, last_step
from harnessopt.objective.trigger import default_objective, is_trigger_task, round_tasks, should_load
from harnessopt.protocols import Task
from harnessopt.workspace import flags
from harnessopt.workspace.scoring import compile_scorer
from harnessopt.workspace.skillspec import read_skill
from harnessopt.workspace.tasks import (
    DEFAULT_SPLIT,
    MIN_VAL_TASKS,
    SPLITS,
    UNASSIGNED,
    assign_splits,
    check_splits,
    default_gives_val,
    first_split,
    load_tasks,
    parse_ratio,
    read_split,
    small_file_split,
    split_counts,
    write_splits,
)
from harnessopt.workspace.templates import (
    loading_templates,
    loads_skills,
    template_meta,
    templates_dir,
    unknown_template,
)

EDITABLE_PATHS = ("skill", "harness")
RECORD_PATHS = ("skill", "harness", "trajectories", "best_skill.md")
GITIGNORE = f"{STATE_DIR}/\n__pycache__/\n*.pyc\n"


@dataclass(frozen=True)
class Workspace:
    """An opened workspace: its root, the run's one validated config, git repo and journal.

    ``cfg`` is harnessopt.yaml with the command line's overrides applied once, at ``open``; it is
    never replaced afterwards.
    """

    root: Path
    cfg: Config
    repo: git.Repo
    journal: Journal
    # the command line's overrides as ``-c`` takes them (``key=value``, the value as YAML): a run
    # records them, so that the command that resumes it can repeat them
    overrides: tuple[str, ...] = ()

    @classmethod
    def open(cls, path: Path, overrides: Mapping[str, Any] | None = None) -> Workspace:
        root = Path(path).resolve()
        if root.exists() and not root.is_dir():
            raise UserError(f"{path} is a file, not a workspace; pass the workspace's directory")
        if not root.is_dir():
            raise UserError(f"{path} does not exist; create a workspace with 'harnessopt init {path} ...'")
        if not (root / ".git").exists():
            raise UserError(
                f"{path} is not a harnessopt workspace (no .git); create one with 'harnessopt init'"
            )
        if not (root / CONFIG_NAME).is_file():
            if _has_tag(root, "ho/round-0"):
                raise UserError(
                    f"{path} has lost its {CONFIG_NAME}; restore it from git, e.g. "
                    f"{vcs.git_in(path)} checkout HEAD -- {CONFIG_NAME}"
                )
            raise UserError(
                f"{path} is not a harnessopt workspace (a git repository without {CONFIG_NAME}); "
                "create one with 'harnessopt init'"
            )
        try:
            repo = vcs.open_repo(root)
            repo.git.rev_parse("ho/round-0")
        except (git.InvalidGitRepositoryError, git.GitCommandError):
            if initial := _initial_commit(root):  # the tag was deleted: name the command that restores it
                raise UserError(
                    f"{path} has lost its ho/round-0 tag (every command reads the workspace from it); "
                    f"restore it with {vcs.git_in(path)} tag ho/round-0 {initial[:12]}"
                ) from None
            raise UserError(f"{path} is not a harnessopt workspace (no ho/round-0 tag)") from None
        try:
            head = vcs.head_sha(repo)
        except ValueError:
            raise UserError(
                f"{path} has no commit on its branch; restore main (git reflog shows it)"
            ) from None
        if not vcs.is_ancestor(repo, "ho/round-0", head):
            raise UserError(
                f"{path}: main ({head[:10]}) does not descend from ho/round-0 (history rewritten, or main "
                "moved to a foreign commit); put main back on a harnessopt commit, e.g. "
                f"{vcs.git_in(path)} reset --hard ho/best"
            )
        main = "refs/heads/main" if vcs.ref_exists(repo, "refs/heads/main") else head
        finishing = last_step(Journal(root).entries()) or {}
        if problem := ledger.tag_problem(
            repo, main, str(finishing.get("commit")) if finishing.get("phase") == "applying" else None
        ):
            raise UserError(f"{path}: {problem}")
        cfg = saved = load_config(root)
        if overrides:
            cfg = apply_overrides(cfg, overrides)
            if cfg.template != saved.template:  # harness/ holds the files of the template init copied
                raise UserError(
                    f"template is set by init (harness/ holds its files; this workspace's is "
                    f"{saved.template}): drop -c template, or init a new workspace with --template "
                    f"{cfg.template}"
                )
        again = tuple(f"{k}={yaml_value(v)}" for k, v in (overrides or {}).items())
        return cls(root, cfg, repo, Journal(root), again)

    def require_main(self) -> None:
        """For a command that moves main (run, rollback, approve, reject): HEAD must be main. Main
        moves by a compare-and-swap of refs/heads/main and a checkout of it, which on a detached
        HEAD or another branch would reset that checkout to main's commit. Reading commands
        (status, log, diff, report) work wherever HEAD is."""
        if where := self.off_main():
            raise UserError(
                f"{self.root}: HEAD is {where}, not on main, where this command commits; put it back "
                f"with {vcs.git_in(self.root)} checkout main"
            )

    def off_main(self) -> str | None:
        """Where HEAD is when it is not on main ("detached", "on BRANCH"), else None."""
        head = self.repo.head
        branch = None if head.is_detached else head.reference.path
        if branch == "refs/heads/main":
            return None
        return "detached" if branch is None else f"on {branch.removeprefix('refs/heads/')}"

    def check_runnable(self) -> None:
        """What ``init`` checked and a later commit on main may have broken, checked again before a
        run spends anything: the incumbent's SKILL.md reads and passes the static check a candidate
        must pass, harness/run.py is there, its flags.yaml (if any) reads, scorer.py compiles, no task is in two splits (by id or by
        input: an edit of tasks/ since), and val holds the smoke test's tasks.
        A UserError that says what to fix."""
        skill = self.root / "skill"
        if not (skill / "SKILL.md").is_file():
            raise UserError(
                f"{skill / 'SKILL.md'} is missing on main; restore it ({vcs.git_in(self.root)} checkout "
                "ho/best -- skill) and commit"
            )
        read_skill(skill, rules_off=self.cfg.checks.skill_rules_off)
        if not (self.root / "harness" / "run.py").is_file():
            raise UserError(
                f"{self.root / 'harness' / 'run.py'} is missing on main; restore it ({vcs.git_in(self.root)} "
                "checkout ho/best -- harness/run.py, and commit if main had lost it) or add one"
            )
        flags.registered(self.root / "harness")  # a candidate's bad flags.yaml is lenient; main's is not
        compile_scorer(self.root / "scorer.py")  # read and compiled, not run: a dry run runs nothing
        if missing := missing_program(self.root):
            raise UserError(missing)
        stored = [task for split in SPLITS for task in read_split(self.root / "tasks", split)]
        check_splits(stored, min_val=0)  # an id or an input in two splits leaks answers, as at init
        val = [task for task in stored if task.split == "val"]
        n_trigger = sum(is_trigger_task(t) for t in val)
        kinds = {"task": ["task"], "trigger": ["trigger"]}.get(self.cfg.objective, ["task", "trigger"])
        for kind in kinds:  # the val tasks the objective runs (objective.trigger.round_tasks), not lines
            n_val = n_trigger if kind == "trigger" else len(val) - n_trigger
            if n_val < MIN_VAL_TASKS:
                raise UserError(
                    f"{self.root / 'tasks' / 'val.jsonl'} holds {n_val} val "
                    + ("task(s)" if kinds == ["task"] else f"{kind}-objective task(s)")
                    + f"; a run needs at least {MIN_VAL_TASKS} for the smoke test: restore the file with git, "
                    "or init a new workspace"
                )

    def tasks(self, split: str) -> list[Task]:
        """The split's tasks of the run's objective (``objective.trigger.round_tasks``)."""
        everything = read_split(self.root / "tasks", split)
        return round_tasks(self.root, self.cfg.objective, self.cfg.trigger.distractors, everything, split)


def missing_program(root: Path) -> str | None:
    """What to do when ``harness/command.yaml`` (the ``command`` template's) runs a file of the
    skill or harness that is not there (``{skill}/scripts/answer.py`` of a skill without one):
    every run would crash, and round 1 stop with nothing learned. None when it is there,
    or there is no such file to check."""
    path = root / "harness" / "command.yaml"
    try:
        argv = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("argv")
    except (OSError, yaml.YAMLError, AttributeError):  # no such harness, or one run.py reports on
        return None
    for item in argv if isinstance(argv, list) else []:
        for part in ("skill", "harness"):
            inside = str(item).removeprefix(f"{{{part}}}/")
            if inside != str(item) and not (root / part / inside).is_file():
                return (
                    f"harness/command.yaml runs {item}, which {part}/ does not have: add "
                    f"{part}/{inside} (the program that answers a task) or change argv in "
                    f"{path}, and commit"
                )
    return None


def _uncopyable(skill_dir: Path) -> str | None:
    """What in the skill folder init cannot copy as it is: a symbolic link to something outside it
    (init copies what a link points to, so the file, a secret or a host file, would be committed and
    shown to the optimizer), a link that leads nowhere (broken, or a loop), or an entry that is
    neither a file nor a folder (a named pipe, a socket, a device)."""
    root = skill_dir.resolve()
    for folder, dirs, files in os.walk(skill_dir):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in [*dirs, *files]:
            path = Path(folder) / name
            if path.is_symlink():
                try:
                    target = path.resolve(strict=True)
                except (OSError, RuntimeError):  # no such file, or a loop
                    return (
                        f"{path} is a symbolic link to {os.readlink(path)}, which leads to no file (broken, or a "
                        "loop): remove the link, or copy the file it meant into the skill"
                    )
                if not target.is_relative_to(root):
                    return (
                        f"{path} is a symbolic link to {os.readlink(path)}, outside the skill folder: init would "
                        "commit what it points to; copy the file into the skill, or remove the link"
                    )
            if not (path.is_file() or path.is_dir()):
                mode = path.stat().st_mode
                kind = (
                    "a named pipe"
                    if stat.S_ISFIFO(mode)
                    else "a socket"
                    if stat.S_ISSOCK(mode)
                    else "a device"
                )
                return (
                    f"{path} is {kind}, not a file: init copies files only; remove it from the skill folder"
                )
    return None


def _each_kind_enough(val: list[Task]) -> bool:
    """Does val hold enough tasks of each kind (trigger tasks, the others) for each gate's smoke test?"""
    trigger = sum(is_trigger_task(t) for t in val)
    return min(trigger, len(val) - trigger) >= MIN_VAL_TASKS


def _check_both_labels(tasks: list[Task], seed: int) -> None:
    """Trigger tasks must hold queries that should load the skill and ones that should not, in the
    file and in val: with only one kind, a description that loads for everything (or for nothing)
    scores 1 on every one, and the gate would accept it (QA)."""
    for where, group in (("the task file", tasks), ("val", [t for t in tasks if t.split == "val"])):
        labels = [should_load(t) for t in group if is_trigger_task(t)]
        if labels and len(set(labels)) == 1:
            missing = "false (near misses that should not load it)" if labels[0] else "true"
            fix = (
                'add trigger tasks of the other kind, e.g. {"trigger": '
                + ("false} for queries a neighbouring skill should answer" if labels[0] else "true}")
                if where == "the task file"
                else f'init with another --seed than {seed}, or give some of them a "split": "val"'
            )
            raise UserError(
                f"{where} holds {len(labels)} trigger task(s), every one with trigger {str(labels[0]).lower()} "
                f"and none with {missing}: a description that loads the skill "
                f"{'for everything' if labels[0] else 'for nothing'} would score 1 on each; {fix}"
            )


def _initial_commit(root: Path) -> str | None:
    """The commit init made (its subject is ``initial_message``'s), on any branch, or None."""
    try:
        out = vcs.open_repo(root).git.log(
            "--all", "--format=%H %s", "--fixed-strings", f"--grep={ledger.INITIAL_SUBJECT}"
        )
    except (git.InvalidGitRepositoryError, git.GitCommandError):
        return None
    shas = [line.split()[0] for line in out.splitlines() if line.partition(" ")[2] == ledger.INITIAL_SUBJECT]
    return shas[-1] if len(shas) == 1 else None


def _has_tag(root: Path, tag: str) -> bool:
    try:
        return vcs.ref_exists(vcs.open_repo(root), f"refs/tags/{tag}")
    except git.InvalidGitRepositoryError:
        return False


def init_workspace(
    ws: Path,
    skill_dir: Path,
    tasks_file: Path | list[Task],
    *,
    template: str = "chat",
    ratio: str | None = None,
    seed: int = 0,
    config: Config | None = None,
    extra_files: dict[str, Path] | None = None,
    announce: Callable[[str], None] = print,
    check_folder_name: bool = False,
) -> Path:
    """Validate every input first, build the workspace beside ``ws``, then move it into place.

    A failure at any point leaves ``ws`` as it was (absent or empty). ``check_folder_name``: the
    skill's name must match its folder (the spec; ``init`` asks it unless
    ``checks.skill_rules_off`` has folder-name). Without ``ratio`` the split
    is ``DEFAULT_SPLIT``, or for a file too small for it one that gives the smoke test its val tasks.
    """
    ws = Path(ws)
    if ws.exists() and not ws.is_dir():
        raise UserError(f"{ws} is a file; choose a new directory for the workspace")
    if ws.exists() and any(ws.iterdir()):
        raise UserError(f"{ws} exists and is not empty; choose a new directory for the workspace")
    if home := next(
        (p for p in ws.resolve().parents if (p / CONFIG_NAME).is_file() and (p / ".git").exists()), None
    ):
        raise UserError(f"{ws} is inside the workspace {home}; choose a workspace path outside it")
    if file := next((p for p in ws.absolute().parents if p.exists() and not p.is_dir()), None):
        raise UserError(f"{file} is a file, not a directory; choose a workspace path outside it")
    if Path(skill_dir).resolve() in (ws.resolve(), *ws.resolve().parents):
        raise UserError(f"{ws} is inside the skill directory {skill_dir}; choose a workspace path outside it")
    if unknown := unknown_template(template):
        raise UserError(unknown)
    if bad := _uncopyable(Path(skill_dir)):
        raise UserError(bad)
    cfg = config or Config(template=template)
    rules_off = cfg.checks.skill_rules_off
    folder = Path(skill_dir).resolve().name if check_folder_name else None  # the spec: name = folder
    info = read_skill(Path(skill_dir), expect_name=folder, rules_off=rules_off)
    # read once: a pipe (``--tasks <(...)``) gives its lines to the first reader only
    loaded = list(tasks_file) if isinstance(tasks_file, list) else load_tasks(Path(tasks_file))
    works = small_file_split(loaded, seed)
    chose = ""  # said once the workspace is made: a refusal after it is the one line a user sees
    asked = ratio is not None  # --split given
    if ratio is None:
        ratio = DEFAULT_SPLIT
        if not default_gives_val(loaded) and works:
            ratio = works
            chose = (
                f"{len(loaded)} tasks: the default split {DEFAULT_SPLIT} leaves val too few for the smoke "
                f"test, so this workspace uses --split {ratio} (train:val:test)"
            )
    tasks = assign_splits(loaded, parse_ratio(ratio), seed)
    check_splits(tasks, suggest=works, ratio_applies=any(t.split == UNASSIGNED for t in loaded))
    if asked and not any(t.split == UNASSIGNED for t in loaded):  # silently ignored, else
        chose = f'every task has its "split" in the file: --split {ratio} changed nothing'
    elif chose:  # the counts the split names, unless keeping same-input tasks together moved some
        todo = [i for i, t in enumerate(loaded) if t.split == UNASSIGNED]
        made = tuple(sum(tasks[i].split == s for i in todo) for s in SPLITS)
        if made != split_counts(len(todo), parse_ratio(ratio)):
            chose += f"; tasks with one input stay together, so it made {made[0]}:{made[1]}:{made[2]}"
    if "objective" not in cfg.model_fields_set:  # trigger tasks only: objective trigger; some: both
        cfg = cfg.model_copy(update={"objective": default_objective(tasks)})
    if cfg.objective != "task" and not loads_skills(template):  # every trigger run would score 0, paid for
        raise UserError(
            f'objective {cfg.objective} (tasks whose answer is {{"trigger": ...}}): the {template} template '
            "offers the model no skill-loading tool, so whether the skill loaded cannot be measured; use "
            f"--template {' or '.join(loading_templates())}"
        )
    if cfg.objective != "task":  # a description that loads for everything must not win
        _check_both_labels(tasks, seed)
    if cfg.objective == "both":  # each objective has its own gate, on its own val tasks
        val = [t for t in tasks if t.split == "val"]
        n_trigger = sum(is_trigger_task(t) for t in val)
        if min(n_trigger, len(val) - n_trigger) < MIN_VAL_TASKS:
            fix = (
                f"init with --split {each} (train:val:test), which gives each kind {MIN_VAL_TASKS} or more, "
                if (each := first_split(loaded, seed, _each_kind_enough, MIN_VAL_TASKS))
                else ""
            )
            raise UserError(
                f"objective both: val holds {len(val) - n_trigger} task(s) of the task objective and {n_trigger} "
                f"trigger task(s); each objective's gate needs at least {MIN_VAL_TASKS} val tasks for its smoke "
                f"test: {fix}add tasks of the kind that is short, or give each kind a workspace of its own"
            )
    cfg = cfg.model_copy(update={"template": template})
    needs = template_image(template)  # the image the template runs in, unless the config names one
    if needs and "image" not in cfg.rollout.model_fields_set:
        cfg = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"image": needs})})
    memory = template_meta(template).get("memory_mb")  # what the template's agent needs, likewise
    if memory and "memory_mb" not in cfg.rollout.model_fields_set:
        cfg = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"memory_mb": int(memory)})})

    parent = ws.resolve().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{ws.name}.init-", dir=parent))
    except PermissionError:  # named by the folder, not by the staging path that could not be made
        raise UserError(
            f"cannot create {ws}: permission denied in {parent}; choose a folder this user may write"
        ) from None
    try:
        _populate(staging, Path(skill_dir), template, tasks, cfg, extra_files or {})
        own_identity = _first_commit(staging, info.name, len(tasks))
        if ws.exists():
            ws.rmdir()
        os.rename(staging, ws)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    counts = {s: sum(t.split == s for t in tasks) for s in ("train", "val", "test")}
    if chose:
        announce(chose)
    if own_identity:
        announce(vcs.identity_note(ws))
    announce(
        f"workspace {ws}: skill '{info.name}', template {template}, "
        f"{counts['train']} train / {counts['val']} val / {counts['test']} test tasks; tagged ho/round-0"
        + (f"; objective: {cfg.objective}" if cfg.objective != "task" else "")
    )
    if cfg.objective != "task" and not (ws / cfg.trigger.distractors).is_dir():  # QA: init never said
        announce(
            f"objective {cfg.objective}: trigger runs offer the skill alone; to measure whether it loads among "
            f"your other skills, put them under {ws / cfg.trigger.distractors}/ (one skill folder each) and "
            "commit them (trigger.distractors, docs/workspace.md)"
        )
    speaks = template_meta(template).get("speaks")
    if speaks and cfg.model.provider == "anthropic":  # the default upstream, not the API it speaks
        announce(
            f"template {template} speaks the {speaks} API; model.provider is anthropic ({cfg.model.target}), "
            "which the gateway translates to: for an OpenAI-compatible endpoint set model.provider: openai, "
            f"model.target and model.base_url in {ws / CONFIG_NAME} (docs/models.md)"
        )
    if template_image(template):
        from harnessopt.sandbox.image.variants import build_command

        announce(
            f"template {template} runs in the sandbox image {cfg.rollout.image} (rollout.image); "
            f"build it once with `{build_command(cfg.rollout.image)}`"
        )
    return ws


def template_image(template: str) -> str | None:
    """The sandbox image tag a template needs (its template.yaml's ``image_with`` variant), if any."""
    from harnessopt.sandbox.image.build import variant_tag

    meta = template_meta(template)
    return variant_tag(meta["image_with"]) if meta.get("image_with") else None


def _populate(
    root: Path, skill_dir: Path, template: str, tasks: list[Task], cfg: Config, extra: dict[str, Path]
) -> None:
    shutil.copytree(skill_dir, root / "skill", symlinks=False, ignore=shutil.ignore_patterns(".git"))
    tpl = templates_dir() / template
    shutil.copytree(tpl, root / "harness", ignore=shutil.ignore_patterns("__pycache__", "template.yaml"))
    write_splits(tasks, root / "tasks")
    shutil.copy2(templates_dir() / "scorer.py", root / "scorer.py")
    (root / "trajectories").mkdir()
    (root / "trajectories" / ".gitkeep").write_text("")
    shutil.copy2(root / "skill" / "SKILL.md", root / "best_skill.md")
    (root / CONFIG_NAME).write_text(_config_header() + dump_config(cfg))
    (root / ".gitignore").write_text(GITIGNORE)
    for name, src in extra.items():
        shutil.copy2(src, root / name)


def _config_header() -> str:
    return (
        "# harnessopt workspace config; every key is documented in docs/workspace.md.\n"
        "# CLI flags of 'harnessopt run' override these values for one run.\n"
    )


def _first_commit(root: Path, skill_name: str, n_tasks: int) -> bool:
    """Round 0's commit and tag; True when the workspace was given its own commit identity."""
    repo, own_identity = vcs.init_repo(root)
    repo.git.add("-A")
    # the skill and harness as copied, as a round's commit would hold them: a skill's own
    # .gitignore must not leave a file out of round 0 that the incumbent's runs read
    vcs.stage_as_recorded(repo, EDITABLE_PATHS)
    repo.git.commit("-q", "-m", ledger.initial_message(skill_name, n_tasks))
    ledger.tag_initial(repo)
    return own_identity
