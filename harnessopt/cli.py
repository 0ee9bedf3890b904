"""Command line. The one place that turns errors into exit codes.

0 done; 1 an internal error; 2 bad input or a state the user must fix (nothing changed);
3 a run finished but some of its rounds failed (budget spent, infrastructure); 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from harnessopt import __version__
from harnessopt.errors import HarnessoptError, RunCutShort, UserError
from harnessopt.ledger.lock import workspace_lock
from harnessopt.limits import MAX_ROUNDS, MAX_RUNS_A_TASK
from harnessopt.util import hardening, interrupts, tmpdirs
from harnessopt.util.console import CliConsole

EXIT_ROUND_FAILED = 3  # a run whose rounds failed (infrastructure, budget): not bad input (2)
EXIT_USER_ERROR = 2  # bad input, or a state the user must fix

console = CliConsole(highlight=False, soft_wrap=True, emoji=False)  # ":b:" in a path or summary is text
err_console = CliConsole(stderr=True, highlight=False, soft_wrap=True, emoji=False)


def say(msg: str) -> None:
    console.print(msg, markup=False)


def say_err(msg: str) -> None:
    """Progress lines when stdout carries JSON for a script."""
    err_console.print(msg, markup=False)


class _Parser(argparse.ArgumentParser):
    """argparse prints usage + exits 2 by itself; keep that to one line that says what to do."""

    commands: Mapping[str, argparse.ArgumentParser] = {}  # the top-level parser's: command -> its parser

    def error(self, message: str) -> Any:
        hint = ""
        if "unrecognized arguments: --" in message and self.prog.split(" ")[-1] in ("run", "audit"):
            hint = "; a setting without a flag of its own is set with -c KEY=VALUE (e.g. -c gate.epochs=3)"
        command = self.prog.split(" ", 1)[1] + " " if " " in self.prog else ""
        raise UserError(f"{message}{hint} (see 'harnessopt {command}--help')")


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, parsed; an argument no parser knows is reported by the command it was
    given to (its name and hint), not by the top-level parser that collects argparse's leftovers."""
    parser = build_parser()
    given = list(sys.argv[1:] if argv is None else argv)
    parsed, extra = parser.parse_known_args(_negative_split_joined(given))
    if extra:
        chosen = parser.commands.get(getattr(parsed, "command", None) or "", parser)
        chosen.error(f"unrecognized arguments: {' '.join(extra)}")
    parsed.argv = given  # as typed: what a dry run says to start the run with
    return parsed


def _negative_split_joined(words: list[str]) -> list[str]:
    """``init ... --split -1:2:3`` as ``--split=-1:2:3``: argparse reads a value that starts with a
    minus as a flag of its own ("expected one argument"); joined, --split's own check says what is
    wrong. Only a value that starts with a minus and a digit: ``--split --tasks`` is left alone."""
    if not words or words[0] != "init":
        return words
    out: list[str] = []
    for i, word in enumerate(words):
        if i and words[i - 1] == "--split" and re.match(r"-[\d.]", word) and out[-1] == "--split":
            out[-1] = f"--split={word}"
        else:
            out.append(word)
    return out


def _whole(text: str) -> int:
    """A whole number as written in ASCII digits: ``int`` also reads "３" (a full-width 3) and
    "1_0", which ``diff``, ``rollback`` and the counts took as 3 and 10."""
    if not re.fullmatch(r"-?[0-9]+", text):
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    return int(text)


_whole.__name__ = "whole number"  # argparse names the type in its message


def _candidate(text: str) -> int:
    """``--candidate``: I, or the name log and the manifest give it (cI, or sI for a step)."""
    return _whole(text[1:] if re.fullmatch(r"[cs][0-9]+", text) else text)


_candidate.__name__ = "candidate number"


def _path(text: str) -> Path:
    """A path as given; an empty one is refused (``Path("")`` is ".", which messages then named)."""
    if not text:
        raise argparse.ArgumentTypeError("expected a path, got an empty string")
    return Path(text)


_path.__name__ = "path"


def _positive(text: str, most: int | None = None) -> int:
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    if most is not None and value > most:
        raise argparse.ArgumentTypeError(f"must be at most {most:,}, got {value:,}")
    return value


def _at_most(most: int) -> Callable[[str], int]:
    """``_positive`` with an upper bound: a count past it is a typo, not a plan."""

    def parse(text: str) -> int:
        return _positive(text, most)

    parse.__name__ = "whole number"  # argparse names the type in its message
    return parse


def build_parser() -> _Parser:
    p = _Parser(
        prog="harnessopt", description="Improve agent skills and harnesses with gated, reviewable commits."
    )
    p.add_argument("--version", action="version", version=f"harnessopt {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p.commands = sub.choices

    init = sub.add_parser("init", help="create a workspace from a skill directory and a task file")
    init.add_argument("ws", type=_path)
    init.add_argument("--skill", type=_path, required=True, help="skill directory (with SKILL.md)")
    init.add_argument("--tasks", type=_path, required=True, help="tasks as JSONL (- reads standard input)")
    init.add_argument(
        "--template",
        default="chat",
        help="harness template (chat, chat-sdk, openai-chat, openai-chat-sdk, tool-agent, claude-code, codex, command)",
    )
    init.add_argument(
        "--split",
        help="train:val:test ratio for tasks without a split (default 2:1:7, or for a file too small "
        "to give val 5 tasks one that does, e.g. 4:5:3 for 12 tasks)",
    )
    init.add_argument("--seed", type=_whole, default=0, help="seed of the split assignment")
    init.add_argument(
        "--skill-rule-off",
        dest="skill_rules_off",
        action="append",
        default=[],
        choices=["folder-name", "unknown-keys"],
        help="an Agent Skills spec rule this skill must break (repeatable; kept as checks.skill_rules_off): "
        "folder-name (name differs from its folder), unknown-keys (front matter keys outside the spec)",
    )

    run = sub.add_parser("run", help="run optimization rounds")
    run.add_argument("ws", type=_path)
    run.add_argument(
        "--rounds", type=_at_most(MAX_ROUNDS), default=1, help="rounds to run (default: %(default)s)"
    )
    run.add_argument("--batch-size", type=_positive, help="train tasks rolled out per round")
    run.add_argument("--target", help="target model (HARNESSOPT_TARGET_MODEL)")
    run.add_argument(
        "--optimizer",
        help="optimizer backend (anthropic, command, claude-code, codex, manual, or package.module:Factory)",
    )
    run.add_argument(
        "--unsafe-host-optimizer",
        action="store_const",
        const=True,
        help="let the optimizer's bash or CLI agent run on this host when the sandbox is not Docker; "
        "it can then reach the API key, the workspace (tasks/ with gold answers) and the network",
    )
    run.add_argument("--sandbox", help="auto, docker, local (or package.module:Factory)")
    run.add_argument(
        "--executor", help="where tasks run: local, ray (docs/cluster.md) or package.module:Factory"
    )
    run.add_argument("--concurrency", type=_positive, help="tasks run at once")
    run.add_argument("--max-calls", type=_positive, help="model calls allowed in this run")
    run.add_argument("--max-tokens", type=_positive, help="model tokens allowed in this run")
    run.add_argument("--max-cost", type=float, help="US dollars allowed in this run")
    run.add_argument("--max-hours", type=float, help="wall-clock hours allowed, checked at phase boundaries")
    _add_config_option(run)
    run.add_argument(
        "--yes", action="store_true", help="do not ask for confirmations; approves a round-0 proposal"
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="print the projected calls, tokens, dollars and time; run nothing",
    )
    run.add_argument(
        "--mlflow",
        nargs="?",
        const="",
        metavar="URI",
        help="log each round to MLflow (default: a SQLite store, sqlite:///WS/.harnessopt/mlflow.db)",
    )
    _show_config_defaults(run, RUN_FLAGS)

    log = sub.add_parser("log", help="one row per round")
    log.add_argument("ws", type=_path)
    log.add_argument("--json", action="store_true")
    diff = sub.add_parser("diff", help="a round's change as a git diff")
    diff.add_argument("ws", type=_path)
    diff.add_argument("round", type=_whole)
    diff.add_argument(
        "--candidate",
        type=_candidate,
        metavar="I",
        help="candidate cI of a round with several (search.candidates), or step sI of an explore round "
        "(search.explore), from its own ref; I, cI or sI",
    )
    ap = sub.add_parser("approve", help="approve the round-0 proposal (harness and joint mode)")
    ap.add_argument("ws", type=_path)
    rj = sub.add_parser(
        "reject", help="reject the round-0 proposal, saying why (the next run diagnoses again)"
    )
    rj.add_argument("ws", type=_path)
    rj.add_argument("--reason", required=True, help="why: the next diagnosis reads it")
    rb = sub.add_parser("rollback", help="restore skill/ and harness/ as of a round, in a new commit")
    rb.add_argument("ws", type=_path)
    rb.add_argument("round", type=_whole)
    st = sub.add_parser("status", help="where the run stands")
    st.add_argument("ws", type=_path)
    rep = sub.add_parser("report", help="an HTML report with plots (needs harnessopt[report])")
    rep.add_argument("ws", type=_path)
    rep.add_argument(
        "--out",
        help="directory for report.html and its plots (default WS/.harnessopt/report), or the page's own "
        "path ending in .html (its plots beside it as STEM-NAME.png)",
    )

    audit = sub.add_parser("audit", help="held-out gain of ho/best over ho/round-0 on the test split")
    audit.add_argument("ws", type=_path)
    audit.add_argument("--epochs", type=_at_most(MAX_RUNS_A_TASK), default=1)
    audit.add_argument("--sandbox", help="auto, docker, local (or package.module:Factory)")
    audit.add_argument(
        "--executor", help="where tasks run: local, ray (docs/cluster.md) or package.module:Factory"
    )
    audit.add_argument("--concurrency", type=_positive)
    _add_config_option(audit)
    audit.add_argument("--force", action="store_true", help="audit the same pair again")
    audit.add_argument("--json", action="store_true")
    _show_config_defaults(audit, ROLLOUT_FLAGS)

    abl = sub.add_parser("ablate", help="a harness feature flag on vs off on val, judged by the gate")
    abl.add_argument("ws", type=_path)
    abl.add_argument("flag", help="a flag registered in harness/flags.yaml (or set in harnessopt.yaml)")
    abl.add_argument("--on", help="HO_FLAG_<FLAG> when on (default 1, for a flag whose default is 1 or 0)")
    abl.add_argument("--off", help="HO_FLAG_<FLAG> when off (default 0, for a flag whose default is 1 or 0)")
    rp = sub.add_parser("replay", help="re-validate the accepted rounds for another target model")
    rp.add_argument("ws", type=_path)
    rp.add_argument("--target", required=True, help="the model to replay on (model.target)")
    for measure in (abl, rp):
        measure.add_argument("--sandbox", help="auto, docker, local (or package.module:Factory)")
        measure.add_argument(
            "--executor", help="where tasks run: local, ray (docs/cluster.md) or package.module:Factory"
        )
        measure.add_argument("--concurrency", type=_positive)
        _add_config_option(measure)
        measure.add_argument("--json", action="store_true")
        _show_config_defaults(measure, ROLLOUT_FLAGS)

    demo = sub.add_parser("demo", help="the whole loop offline on a bundled example (scripted model)")
    demo.add_argument("dir", type=_path, nargs="?", default=Path("harnessopt-demo"))
    demo.add_argument("--sandbox", choices=["auto", "docker", "local"], default="auto")

    sb = sub.add_parser("sandbox", help="build the sandbox image or remove leftover containers")
    sbsub = sb.add_subparsers(dest="action", required=True, parser_class=_Parser)
    build = sbsub.add_parser("build", help="build the Docker image rollouts run in")
    build.add_argument(
        "--base",
        help="base image (default: harnessopt-base:bookworm when it exists, the offline Debian one "
        "sandbox/make_base_image.sh builds, else python:3.11-slim)",
    )
    build.add_argument(
        "--tag", help="image tag (default harnessopt-sandbox:latest, or :claude-code / :codex with --with)"
    )
    build.add_argument(
        "--with",
        dest="with_",
        action="append",
        default=[],
        choices=["claude-code", "codex"],
        help="a variant with more inside: claude-code (Node.js and the Claude Code CLI) or codex "
        "(the Codex CLI), installed with npm on this host",
    )
    sbsub.add_parser("cleanup", help="remove leftover harnessopt containers (by label)")
    return p


def _show_config_defaults(p: argparse.ArgumentParser, flags: dict[str, str]) -> None:
    """Each flag that sets a harnessopt.yaml key says that key and its shipped default in --help."""
    from harnessopt.config import Config

    shipped = Config().model_dump(mode="json")
    for action in p._actions:
        if action.dest not in flags:
            continue
        key = flags[action.dest]
        value: Any = shipped
        for part in key.split("."):
            value = value[part]
        default = (
            "unset" if value is None else ("on" if value else "off") if isinstance(value, bool) else value
        )
        note = f"default: {key} in harnessopt.yaml, shipped as {default}"
        action.help = f"{action.help}; {note}" if action.help else note


def _add_config_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-c",
        dest="config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set any harnessopt.yaml key for this run, e.g. -c gate.epochs=3 (repeatable)",
    )


# The few flags people type daily; any other setting is -c KEY=VALUE.
RUN_FLAGS = {
    "batch_size": "rollout.batch_size",
    "target": "model.target",
    "optimizer": "optimizer.backend",
    "sandbox": "rollout.sandbox",
    "executor": "rollout.executor",
    "concurrency": "rollout.concurrency",
    "max_calls": "budget.max_calls",
    "max_tokens": "budget.max_tokens",
    "max_cost": "budget.max_cost",
    "max_hours": "budget.max_hours",
    "unsafe_host_optimizer": "optimizer.unsafe_host",
}


def _overrides(a: argparse.Namespace, flags: dict[str, str]) -> dict[str, Any]:
    """Flags and -c KEY=VALUE in one mapping; a flag given on the line wins over -c."""
    from harnessopt.config import parse_assignment

    out: dict[str, Any] = dict(parse_assignment(text) for text in a.config)
    for name, key in flags.items():
        if getattr(a, name, None) is not None:
            out[key] = getattr(a, name)
    return out


def cmd_init(a: argparse.Namespace) -> int:
    from harnessopt.config import ChecksConfig, Config
    from harnessopt.gate import noise_floor as noisefloor
    from harnessopt.workspace.core import Workspace, init_workspace
    from harnessopt.workspace.tasks import load_tasks, small_file_split

    # the template is init_workspace's to check and set: a config built with an unknown one would
    # fail its validation with a traceback before that check
    cfg = Config(checks=ChecksConfig(skill_rules_off=a.skill_rules_off))
    loaded = load_tasks(a.tasks)  # once: a pipe (--tasks <(...)) has its lines for one reader
    init_workspace(
        a.ws, a.skill, loaded, template=a.template, ratio=a.split, seed=a.seed, config=cfg, announce=say,
        check_folder_name=True,
    )  # fmt: skip
    ws = Workspace.open(a.ws)
    val_tasks, gate = ws.tasks("val"), ws.cfg.gate
    n_val = len(val_tasks)
    if ws.cfg.objective == "both":  # each kind gated on its own val tasks at its share of the alpha
        from harnessopt.objective import both
        from harnessopt.objective.trigger import is_trigger_task

        n_trigger = sum(is_trigger_task(t) for t in val_tasks)
        n_val = min(n_trigger, n_val - n_trigger)
        gate = gate.model_copy(update={"confidence": 1.0 - (1.0 - gate.confidence) * both.SHARE})
        say(
            f"objective both: each kind of task is gated on its own val tasks at {both.SHARE:g} of the "
            f"alpha; the smaller ({n_val} tasks) is what the lines below are about"
        )
    for line in noisefloor.plan(n_val, gate):  # what this val set can detect
        say(line)
    if a.split is None and ws.cfg.objective != "both" and noisefloor.detects_nothing(n_val, gate):
        # The default split gave val too few tasks (a file of 50 to about 100): name one that detects.
        works = small_file_split(loaded, a.seed)
        val = int(works.split(":")[1]) if works else 0
        if works and not noisefloor.detects_nothing(val, gate):
            say(
                f"--split {works} would give val {val} tasks, which detect about "
                f"{noisefloor.planned_detectable(val, gate):+.3f}: to use it, remove {a.ws} and "
                f"run init again with it"
            )
    if not ws.tasks("test"):
        say("no test tasks: `harnessopt audit` (the held-out gain at the end) has nothing to run on")
    from harnessopt.ledger.round0 import run_command
    from harnessopt.workspace.core import missing_program

    missing = missing_program(ws.root)  # the command template's program, which the skill may lack
    say(
        f"next: {missing}; then {run_command(ws.repo, a.ws, ws.cfg)}"
        if missing
        else f"next: {run_command(ws.repo, a.ws, ws.cfg)}"
    )
    return 0


def cmd_run(a: argparse.Namespace) -> int:
    from harnessopt.reporting.progress import progress_for
    from harnessopt.round import driver
    from harnessopt.round.stop import REASON as STOPPED
    from harnessopt.workspace.core import Workspace

    ws = Workspace.open(a.ws, _overrides(a, RUN_FLAGS))
    ws.check_runnable()  # also for --dry-run, whose projection reads the skill
    from harnessopt.sandbox.docker.pool import concurrency_warning

    if warning := concurrency_warning(ws.cfg.rollout.concurrency):  # one line, at run start
        say(warning)
    from harnessopt.gateway.policy import unpriced_budget

    if unpriced := unpriced_budget(ws.cfg):  # also for --dry-run; before the lock: nothing changed
        raise UserError(unpriced)
    from harnessopt.optimizer.anthropic_agent import first_call_too_dear

    if dear := first_call_too_dear(ws.cfg):  # the first round would fail at its first optimizer call
        raise UserError(dear)
    if a.dry_run:  # no lock, no model call, nothing written
        from harnessopt.reporting.log import before_run
        from harnessopt.reporting.projection import project
        from harnessopt.round.services import preflight, unset_keys

        preflight(ws.root, ws.cfg)  # what the run would refuse at its start
        if a.mlflow:  # a tracking server the run's --mlflow names must answer, as the run asks
            from harnessopt.reporting.mlflow import check_server

            check_server(a.mlflow)

        for line in project(ws, a.rounds).table():
            say(line)
        # the run as asked for: without --dry-run, or the prefix of it argparse took for it (--dry)
        again = shlex.join(w for w in a.argv if not (w.startswith("--d") and "--dry-run".startswith(w)))
        first = before_run(ws)  # off main, or with uncommitted changes, the run would be refused
        if keys := unset_keys(ws.cfg):  # a projection needs no key; the run it names does
            first += f"set {' and '.join(keys)} in the environment, then "
        say(f"dry run: nothing was run; start it with: {first}harnessopt {again}")
        return 0
    ws.require_main()
    if a.mlflow is not None:  # what the run refuses at its start, before an MLflow run is made for it
        from harnessopt.round.services import preflight

        preflight(ws.root, ws.cfg)
    with (
        workspace_lock(ws.root, "run", say),
        _mlflow(ws, a.mlflow) as on_round,
        progress_for(console) as progress,
    ):
        cut: RunCutShort | None = None
        try:
            results = driver.run(
                ws,
                a.rounds,
                progress.say,
                progress=progress,
                on_round=on_round,
                decide=_round0_decider(a.yes, progress.ask),
            )
        except RunCutShort as e:  # rounds were recorded first: say what they did, then why it stopped
            results, cut = e.results, e
    for r in results:
        say(f"round {r.round}: {r.status} ({r.commit[:10]}) {r.reason}")
    q = shlex.quote(str(a.ws))
    last = f" {results[-1].round}" if results else " K"  # a round of this run, as an example
    say(f"review: harnessopt log {q}  |  harnessopt diff {q}{last}  |  harnessopt report {q}")
    failed = [r for r in results if r.status == "failed" and r.reason != STOPPED]
    if failed:
        rounds = ", ".join(str(r.round) for r in failed)
        say_err(f"harnessopt: round(s) {rounds} failed: {failed[-1].reason.splitlines()[0][:300]}")
    if cut is not None:
        say_err(f"harnessopt: {_one_line(str(cut))}")
    return EXIT_ROUND_FAILED if failed else EXIT_USER_ERROR if cut is not None else 0


@contextmanager
def _mlflow(ws: Any, uri: str | None) -> Iterator[Callable[[Any], None] | None]:
    """With --mlflow: one MLflow run for this harnessopt run, a step per round; else nothing."""
    if uri is None:
        yield None
        return
    from harnessopt.reporting.mlflow import MlflowRun

    with MlflowRun(ws, uri or None, say) as run:
        yield run.log_round


def _round0_decider(yes: bool, ask: Callable[[str], str]) -> Callable[[Any], tuple[str, str] | None]:
    """How ``run`` gets a decision on a round-0 proposal: --yes approves, a terminal asks (``ask``:
    the run's progress, which stops its bars for the prompt), else none (the run stops and says the
    next command)."""
    from harnessopt.round.round0 import describe

    def decide(st: Any) -> tuple[str, str] | None:
        if yes:
            return ("approve", "--yes")
        if not sys.stdin.isatty():
            return None
        for line in describe(st):
            say(line)
        prompt = "Approve this round-0 proposal? [y]es / [n]o (reject) / [l]ater: "
        try:
            while (answer := ask(prompt).strip().lower()) not in ROUND0_ANSWERS:
                prompt = "Answer y (approve), n (reject) or l (later, the default on an empty line): "
            if ROUND0_ANSWERS[answer] == "approve":
                return ("approve", "prompt")
            if ROUND0_ANSWERS[answer] == "reject":
                try:
                    why = ask("Why (the next diagnosis reads it)? ").strip()
                except EOFError:  # the "n" stands; only the reason is missing (QA: taken as "later")
                    why = ""
                return ("reject", why or "rejected at the prompt")
        except EOFError:  # stdin closed at the prompt: decide later, as without a terminal
            pass
        return None

    return decide


# what the round-0 prompt takes; anything else asks again (an "x" was taken as "later", unsaid: QA)
ROUND0_ANSWERS = {"y": "approve", "yes": "approve", "n": "reject", "no": "reject", "l": "later",
                  "later": "later", "": "later"}  # fmt: skip


def cmd_decide(a: argparse.Namespace) -> int:
    """``approve`` / ``reject``: a person's decision on the round-0 proposal, recorded on main."""
    from harnessopt.ledger.round0 import record_decision
    from harnessopt.workspace.core import Workspace

    ws = Workspace.open(a.ws)
    ws.require_main()
    approve = a.command == "approve"
    from harnessopt.ledger.round0 import run_command, state

    if ws.cfg.mode == "skill" and state(ws.repo) is None:
        raise UserError(
            f"{a.ws} is in skill mode, which has no round-0 proposal to decide on (harness and joint "
            f"mode start with one); `{run_command(ws.repo, a.ws, ws.cfg)}` goes straight to the next round"
        )
    run = run_command(ws.repo, a.ws, ws.cfg)  # with -c mode=M when the proposal was made in another mode
    with workspace_lock(ws.root, a.command, say):
        st = record_decision(ws.repo, approve, "" if approve else a.reason, run=run)
    say(f"round-0 proposal {st.commit[:10]} {st.status} ({st.decision_commit and st.decision_commit[:10]})")
    run = run_command(ws.repo, a.ws, ws.cfg)  # the decision may change what goes on from it
    if approve:
        say(f"next: {run}   (the next rounds implement it, gated like any round)")
    else:
        say(f"next: {run}   (diagnoses again, told why), or set mode: skill")
    return 0


def cmd_log(a: argparse.Namespace) -> int:
    from harnessopt.reporting.log import log_rows, print_log
    from harnessopt.workspace.core import Workspace

    ws = Workspace.open(a.ws)
    if a.json:
        print(json.dumps(log_rows(ws), indent=2))
    else:
        print_log(ws, console)
    return 0


def cmd_diff(a: argparse.Namespace) -> int:
    from harnessopt.reporting.log import round_diff
    from harnessopt.workspace.core import Workspace

    print(round_diff(Workspace.open(a.ws), a.round, a.candidate), end="")
    return 0


def cmd_rollback(a: argparse.Namespace) -> int:
    from harnessopt.ledger.rollback import rollback
    from harnessopt.workspace.core import Workspace

    ws = Workspace.open(a.ws)
    ws.require_main()
    with workspace_lock(ws.root, "rollback", say):
        say(rollback(ws, a.round))
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    from harnessopt.reporting.html import write_report
    from harnessopt.workspace.core import Workspace

    ws = Workspace.open(a.ws)
    if a.out is not None and not a.out.strip():  # Path("") would be the current directory
        raise UserError("--out is empty; name a folder or an .html file (default: .harnessopt/report/)")
    try:
        path = write_report(ws, None if a.out is None else Path(a.out))
    except OSError as e:  # the workspace's own folder (no --out given) may be where it cannot write
        if a.out is not None or e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        raise UserError(
            f"cannot write the report in {e.filename or ws.root} ({(e.strerror or str(e)).lower()}); "
            "give --out DIR (or FILE.html) where this user may write"
        ) from None
    say(f"report: {path} (open it in a browser; the plots are beside it)")
    return 0


def cmd_status(a: argparse.Namespace) -> int:
    from harnessopt.reporting.log import status_lines
    from harnessopt.workspace.core import Workspace

    for line in status_lines(Workspace.open(a.ws)):
        say(line)
    return 0


# Where a measuring command's rollouts run: its --sandbox, --executor and --concurrency.
ROLLOUT_FLAGS = {
    "sandbox": "rollout.sandbox",
    "executor": "rollout.executor",
    "concurrency": "rollout.concurrency",
}


def _measuring(
    a: argparse.Namespace, name: str, run: Callable[[Any, Any], dict[str, Any]], **flags: str
) -> int:
    """audit, ablate and replay: the workspace under the rollout flags (and ``flags``), its lock,
    live progress (on stderr with --json), ``run(ws, progress)``, and its report as JSON when asked."""
    from harnessopt.reporting.progress import progress_for
    from harnessopt.workspace.core import Workspace

    ws = Workspace.open(a.ws, _overrides(a, {**flags, **ROLLOUT_FLAGS}))
    ws.check_runnable()  # as a run checks it: a traceback, or every run paid for and crashed
    from harnessopt.ledger import vcs

    if dirty := vcs.dirty_paths(ws.repo):  # the states measured are commits; tasks and scorer the tree's
        raise UserError(
            f"{ws.root} has uncommitted changes ({dirty[0]}{f' and {len(dirty) - 1} more' if len(dirty) > 1 else ''}): "
            f"{name} measures committed states, so an edit would not be measured or would be mixed in; "
            "commit or stash them, then run it again"
        )
    with workspace_lock(ws.root, name, say_err), progress_for(err_console if a.json else console) as p:
        report = run(ws, p)
    if a.json:
        print(json.dumps(report, indent=2))
    return 0


def cmd_audit(a: argparse.Namespace) -> int:
    from harnessopt.commands.audit import run_audit

    return _measuring(
        a, "audit", lambda ws, p: run_audit(ws, epochs=a.epochs, force=a.force, say=p.say, progress=p)
    )


def cmd_ablate(a: argparse.Namespace) -> int:
    from harnessopt.commands.ablate import run_ablation

    return _measuring(
        a, "ablate", lambda ws, p: run_ablation(ws, a.flag, on=a.on, off=a.off, say=p.say, progress=p)
    )


def cmd_replay(a: argparse.Namespace) -> int:
    from harnessopt.commands.replay import run_replay

    return _measuring(a, "replay", lambda ws, p: run_replay(ws, say=p.say, progress=p), target="model.target")


def cmd_demo(a: argparse.Namespace) -> int:
    from harnessopt.commands.demo import run_demo

    return run_demo(a.dir, sandbox=a.sandbox, say=say, console=console)


def cmd_sandbox(a: argparse.Namespace) -> int:
    from harnessopt.sandbox.image import build as image

    if a.action == "build":
        from harnessopt.config import image_ref_problem

        for flag, ref in (("--base", a.base), ("--tag", a.tag)):
            if ref is not None and (problem := image_ref_problem(ref)):
                raise UserError(f"{flag} {problem}")
        tag = a.tag or image.variant_tag(a.with_)
        if a.with_:
            from harnessopt.sandbox.image.variants import build_image_with

            build_image_with(a.base, tag, a.with_, announce=say)
        else:
            image.build_image(base=a.base, tag=tag, announce=say)
    else:
        say(f"removed {image.cleanup_containers()} leftover container(s)")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "init": cmd_init,
    "run": cmd_run,
    "log": cmd_log,
    "diff": cmd_diff,
    "approve": cmd_decide,
    "reject": cmd_decide,
    "rollback": cmd_rollback,
    "status": cmd_status,
    "report": cmd_report,
    "audit": cmd_audit,
    "ablate": cmd_ablate,
    "replay": cmd_replay,
    "demo": cmd_demo,
    "sandbox": cmd_sandbox,
}


def _one_line(message: str) -> str:
    """An error as one line: a line break it quotes (a path holding one) is shown as ``\\n``."""
    return message.replace("\r", "\\r").replace("\n", "\\n")


def main(argv: Sequence[str] | None = None) -> int:
    hardening.make_non_dumpable()  # other processes of this uid cannot read our environ (the key) or memory
    interrupts.install()
    try:
        args = parse(argv)
        with tmpdirs.claimed():  # every temporary folder inside one, which a killed run's next run removes
            code = COMMANDS[args.command](args)
        interrupts.run_exit_callbacks()  # here, where a stop signal as they run still gets its line (QA)
        return code
    except UserError as e:
        err_console.print(f"harnessopt: {_one_line(str(e))}", markup=False)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        err_console.print(
            "harnessopt: interrupted; main is unchanged past the last recorded round", markup=False
        )
        return 130
    except interrupts.Terminated as e:  # SIGTERM, SIGHUP: what started has been stopped on the way out
        with suppress(OSError):  # a closed terminal (SIGHUP) takes no line
            err_console.print(
                f"harnessopt: stopped by {e.name}; main is unchanged past the last recorded round",
                markup=False,
            )
        return 128 + e.signum
    except HarnessoptError as e:
        err_console.print(f"harnessopt: {_one_line(str(e))}", markup=False)
        return 1
    except BrokenPipeError:  # before OSError, of which it is one: a reader such as `head` went away
        return 0
    except OSError as e:
        line = os_error_line(e)
        if line is None:
            raise
        err_console.print(f"harnessopt: {line}", markup=False)
        return 2
    finally:  # the console script's and python -m's way out alike
        interrupts.last_words()  # a stop signal in the interpreter's teardown: a line, not a silent exit


# What a file the user gave or owns can refuse us, and what to do about it (the rest is ours: raised).
_OS_ADVICE = {
    errno.EACCES: "give this user access to it and run again",
    errno.EPERM: "give this user access to it and run again",
    errno.EROFS: "use a location on a writable file system",
    errno.ENAMETOOLONG: "use a shorter path",
    errno.ENOTDIR: "a part of the path is a file, not a directory; use another path",
    errno.ELOOP: "the path has a symlink loop; use another path",
}


def os_error_line(e: OSError) -> str | None:
    """One line for an ``OSError`` that comes from the user's files (a full disk, a file we may not
    read, a name too long), or None for one that is ours to raise. ``shutil.copytree`` gathers its
    errors into one ``shutil.Error`` with no errno of its own: its first is read."""
    if isinstance(e, shutil.Error) and e.args and isinstance(e.args[0], list) and e.args[0]:
        src, _dst, why = e.args[0][0]
        for code in (errno.ENOSPC, *_OS_ADVICE):
            if os.strerror(code) in str(why):
                return os_error_line(OSError(code, os.strerror(code), src))
        return None
    where = f" ({e.filename})" if e.filename else ""
    if e.errno in (errno.ENOSPC, errno.EDQUOT) or os.strerror(errno.ENOSPC) in str(e):
        return f"no space left on the disk{where}; free some space and run again"
    if e.errno in _OS_ADVICE:
        return f"{(e.strerror or str(e)).lower()}{where}; {_OS_ADVICE[e.errno]}"
    return None


if __name__ == "__main__":
    sys.exit(main())
