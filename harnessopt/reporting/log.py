"""What users read: ``log``, ``status``, ``diff`` and ``rollback`` (all from git, the source of truth)."""

from __future__ import annotations

import shlex
import time
from typing import Any, Literal

import git
import yaml
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harnessopt.config import CONFIG_NAME, Config, parse_config
from harnessopt.errors import UserError
from harnessopt.ledger import live_spend, vcs
from harnessopt.ledger import round0 as proposals
from harnessopt.ledger import store as ledger
from harnessopt.ledger.journal import last_run_start, stopped_step
from harnessopt.ledger.lock import live_holder
from harnessopt.ledger.manifest import ChecksRecord, judged, pooled_dead_zone, spend_of
from harnessopt.reporting.gate_evidence import confirmation_note, evidence_lines
from harnessopt.reporting.triggering import trigger_note, trigger_row
from harnessopt.round.stop import stop_path
from harnessopt.util.console import CliConsole
from harnessopt.util.text import duration
from harnessopt.util.text import visible as _visible
from harnessopt.workspace.core import EDITABLE_PATHS, Workspace


def log_rows(ws: Workspace, records: list[ledger.Round] | None = None) -> list[dict[str, Any]]:
    """One row per round (round 0, the initial state, is not a round); ``records``: `ledger.rounds`,
    if read already."""
    rows = []
    for r in ledger.rounds(ws.repo) if records is None else records:
        if r.round <= 0:
            continue
        m = r.manifest
        rows.append(
            {
                "round": r.round,
                "status": r.status,
                "val_score": m.val_score,
                "incumbent": m.parent,  # the commit the round started from
                "started_from": rollback_of(ws, m.parent),
                "incumbent_score": m.incumbent_score,
                "delta": m.delta,
                "dead_zone": pooled_dead_zone(m),  # none for objective both: per family
                "n": m.n,
                "fixed": m.fixed,
                "broken": m.broken,
                "commit": r.commit,
                "ref": r.ref,
                "summary": m.title,
                "reason": m.reason,
                "changed": m.changed,
                "violations": m.violations,
                "tokens": {role: u.model_dump() for role, u in m.tokens.items()},
                "cost_usd": m.cost_usd,
                "notes": m.notes,
                "checks": m.checks.model_dump(mode="json"),
                "confirmation": m.confirmation.model_dump(mode="json") if m.confirmation else None,
                "noise_floor": m.noise_floor.model_dump(mode="json") if m.noise_floor else None,
                "train_passed": m.train_passed,
                "train_tasks": m.train_tasks,
                "failures": {p: dict(s.failures) for p, s in m.phases.items() if s.failures},
                "wall_s": m.wall_s,
                "candidates": [c.model_dump() for c in m.search.candidates] if m.search else [],
                "alpha_split": m.search.alpha_split if m.search else 1,
                "explore_head": m.search.head if m.search else "",
                "trigger": trigger_row(m.trigger),
            }
        )
    return rows


def print_log(ws: Workspace, console: Console) -> None:
    """The rounds as a table that fits 100 columns: scores, fixed/broken, the train pass rate,
    dollars, writes discarded outside the whitelist, and the summary with the gate's reason."""
    records = ledger.rounds(ws.repo)
    rows = log_rows(ws, records)
    r0 = proposals.spend_line(ws.repo)
    if not rows:
        if r0:
            console.print(r0, markup=False)
        if busy := live_holder(ws.root):  # a run is going: the command to start one would be refused
            console.print(
                f"no rounds recorded yet; 'harnessopt {busy.get('command', 'run')}' (pid {busy.get('pid')}) is "
                f"running: harnessopt status {shlex.quote(str(ws.root))} shows where it is",
                markup=False,
            )
        elif (
            st := proposals.state(ws.repo)
        ) is not None and st.status == "pending":  # a person decides first
            q = shlex.quote(str(ws.root))
            console.print(
                f"no rounds yet; round 0's proposal ({proposals.PROPOSAL_PATH}) waits for your decision: "
                f"harnessopt approve {q}   |   harnessopt reject {q} --reason '...'",
                markup=False,
            )
        else:  # the command as it is pasted: its paths and settings may hold brackets
            console.print(
                f"no rounds yet; start with: {proposals.run_command(ws.repo, ws.root, ws.cfg)}", markup=False
            )
        return
    table = Table(
        title=f"harnessopt rounds in {ws.root}", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True
    )
    for col in ("#", "status", "val", "Δ", "zone", "+fix/-brk", "train", "cost", "viol"):
        table.add_column(col, no_wrap=True, justify="left" if col == "status" else "right")
    table.add_column("summary / reason", ratio=1, min_width=30)
    for r in rows:
        train = f"{r['train_passed']}/{r['train_tasks']}" if r["train_tasks"] else ""
        table.add_row(
            str(r["round"]),
            _status_style(r["status"]),
            _fmt(r["val_score"]),
            _fmt(r["delta"], sign=True),
            _fmt(r["dead_zone"]),
            f"+{len(r['fixed'])}/-{len(r['broken'])}" if r["n"] else "",
            train,
            _cost(r),
            f"[red]{len(r['violations'])}[/red]" if r["violations"] else "0",
            f"{visible(r['summary'])}\n[dim]{visible(reason_line(r))}[/dim]" + _candidate_lines(r),
        )
    if not console.is_terminal and console.width < LOG_WIDTH:  # a pipe would squeeze it to 80 columns
        console = CliConsole(width=LOG_WIDTH, highlight=False, emoji=False, file=console.file)
    console.print(table)
    if r0:
        console.print(r0, markup=False)
    if " = round " not in (now := incumbent_line(ws, records)):  # main is no round's commit: a rollback, say
        console.print(now, markup=False)  # the table's last round is not what the next run starts from
    entries = ws.journal.entries()
    if stopped_applying(ws, entries) == "pending" and (stopped := stopped_step(entries)) is not None:
        console.print(  # its row reads accepted, main does not hold it yet (QA)
            f"round {stopped.get('round')} was accepted, but the run stopped before main moved to it: the "
            f"next run applies it (harnessopt status {shlex.quote(str(ws.root))})",
            markup=False,
        )


LOG_WIDTH = 100


def _cost(row: dict[str, Any]) -> str:
    """Dollars; ``~`` marks a cost counted from estimated tokens (an upstream that sent no usage)."""
    if row["cost_usd"] is None:
        return ""
    guessed = any(u.get("estimated_calls") for u in row["tokens"].values())
    return f"{'~' if guessed else ''}${row['cost_usd']:.2f}"


def visible(text: str) -> str:
    """Untrusted text (a summary, a reason) safe for rich markup and a terminal."""
    return escape(_visible(text))


def review_notes(checks: ChecksRecord | dict[str, Any]) -> list[str]:
    """The notes of the candidate checks that flag a round for review (``checks.<name>.note``)."""
    data = checks.model_dump(mode="json") if isinstance(checks, ChecksRecord) else checks
    return [str(c["note"]) for c in data.values() if isinstance(c, dict) and c.get("note")]


def reason_line(row: dict[str, Any]) -> str:
    """A round's reason as log and the report show it: with its confirmation, the rollback it
    started from, its triggering, a leakage warning and what a check flags for review."""
    note = confirmation_note(row.get("confirmation"))
    reason = f"{row['reason']}; {note}" if note else str(row["reason"])
    if row.get("started_from"):  # main was rolled back before this round
        reason = f"started from {row['started_from']}; {reason}"
    if note := trigger_note(row.get("trigger")):
        reason += f"; {note}"
    leak = ChecksRecord.model_validate(row.get("checks") or {}).leakage
    if leak is not None and leak.action == "warn" and leak.tasks:  # checks.leakage: warn let it through
        reason += f"; leakage warning: copies task(s) {', '.join(leak.tasks[:5])}"
    for note in review_notes(row.get("checks") or {}):  # a check that flags the round for review
        reason += f"; {note}"
    return reason


def _candidate_lines(row: dict[str, Any]) -> str:
    """A round with several candidates: one dim line each, its screen result and why."""
    lines = []
    for c in row.get("candidates") or []:
        line = f"{'*' if c['chosen'] else ' '}{c['name']} "
        if c["mean_delta"] is None:
            line += c["reason"]
        else:  # the numbers once, the reason without them
            line += f"{c['mean_delta']:+.3f} on train (won {len(c['wins'])}, lost {len(c['losses'])})"
            line += f", checkpoint {c['checkpoint']:.3f}: " if c.get("checkpoint") is not None else ": "
            line += c["reason"].rsplit(" (", 1)[0]
        if v := judged(c.get("verdict", ""), c.get("gate_alpha")):  # each validated winner's, with its alpha
            line += f"; {v}"
        lines.append(line)
    return "".join(f"\n[dim]{visible(line)}[/dim]" for line in lines)


def _status_style(status: str) -> str:
    color = {"accepted": "green", "rejected": "red", "noop": "yellow", "failed": "magenta"}.get(
        status, "white"
    )
    return f"[{color}]{status}[/{color}]"


def _fmt(x: Any, sign: bool = False) -> str:
    if x is None:
        return ""
    return f"{x:+.3f}" if sign else f"{x:.3f}"


def round_diff(ws: Workspace, k: int, candidate: int | None = None) -> str:
    """The change a round proposed (accepted or not), as a git diff of skill/ and harness/;
    ``candidate``: candidate cI of a round with several, from its own ref."""
    r = ledger.find(ws.repo, k)
    if k == 0:
        raise UserError("round 0 is the initial state and has no diff; pick a round >= 1")
    if candidate is not None:
        return _candidate_diff(ws, r, candidate)
    parent = r.manifest.parent or ws.repo.commit(r.commit).parents[0].hexsha
    header = f"# round {k}: {r.status} ({r.ref} {r.commit[:10]})\n# {r.manifest.reason}\n"
    if r.manifest.violations:  # what the optimizer wrote outside the whitelist never reached the candidate
        header += (
            f"# discarded {len(r.manifest.violations)} write(s) outside the whitelist (not in this diff):\n"
        )
        whose: dict[str, list[str]] = {}  # several candidates: the round's hold each one's
        for c in r.manifest.search.candidates if r.manifest.search else []:
            for path in c.violations:
                whose.setdefault(path, []).append(c.name)
        header += "".join(
            f"#   {path}" + (f" (by {', '.join(whose[path])})" if path in whose else "") + "\n"
            for path in r.manifest.violations
        )
    body = vcs.diff(ws.repo, parent, r.commit, EDITABLE_PATHS)
    return header + (body if body.strip() else "# (no change to skill/ or harness/)\n")


def status_lines(ws: Workspace) -> list[str]:
    records = ledger.rounds(ws.repo)
    rounds = [r for r in records if r.round > 0]
    counts: dict[str, int] = {}
    for r in rounds:
        counts[r.status] = counts.get(r.status, 0) + 1
    best = ledger.best(ws.repo)
    lines = [
        f"workspace: {ws.root} (mode {ws.cfg.mode}, template {ws.cfg.template}, "
        + (f"objective {ws.cfg.objective}, " if ws.cfg.objective != "task" else "")
        + f"model {ws.cfg.model.provider}:{ws.cfg.model.target})",
        f"rounds: {len(rounds)} ({', '.join(f'{v} {k}' for k, v in sorted(counts.items())) or 'none yet'})",
        incumbent_line(ws, records),
        f"best: round {best.round if best.round >= 0 else '?'} ({best.commit[:10]}), val score "
        f"{_best_score(ws, best, rounds)}"
        + (
            ""
            if vcs.ref_exists(ws.repo, f"refs/tags/{ledger.BEST_TAG}")
            else f" (the {ledger.BEST_TAG} tag is missing: this is the ledger's best; "
            f"{vcs.git_in(ws.root)} tag {ledger.BEST_TAG} {best.commit[:10]} restores it)"
        ),
    ]
    if used := last_run_parts(ws):
        lines.append("last run used: " + ", ".join(f"{k} {v}" for k, v in used.items()))
    if vcs.ref_exists(ws.repo, ledger.EXPLORE_HEAD_REF):
        kept = ws.repo.commit(ledger.EXPLORE_HEAD_REF)
        lines.append(
            f"explore head: {kept.hexsha[:10]} ({visible(str(kept.summary)[:100])}): the next round goes on "
            f"from it (git update-ref -d {ledger.EXPLORE_HEAD_REF} to start again from main)"
        )
    lines += evidence_lines(ws)
    cost = sum(r.manifest.cost_usd or 0.0 for r in rounds) + proposals.spend(ws.repo)["cost_usd"]
    guessed = sum(u.estimated_calls for r in rounds for u in r.manifest.tokens.values())
    lines.append(
        f"model cost recorded: ${cost:.4f}"
        + (" (round 0 included)" if proposals.spend_line(ws.repo) else "")
        + (f" (~ estimated: {guessed} calls without usage)" if guessed else "")
    )
    if r0 := proposals.spend_line(ws.repo):
        lines.append(r0)
    if measured := measured_line(ws):
        lines.append(measured)
    lines += projected_vs_spent(ws)
    notes = list(dict.fromkeys(n for r in rounds for n in r.manifest.notes))
    lines += [f"note: {n}" for n in notes]
    entries, torn = ws.journal.read()
    busy = live_holder(ws.root)
    lines += interrupted_spend(ws, entries, {r.round for r in rounds}, busy is None)
    last = entries[-1] if entries else None
    if torn:
        lines.append(
            f"journal: {torn} line(s) that do not read (a crash mid-write, or an edit) skipped; the rest is intact"
        )
    if busy is not None:  # a command is running now: say so, and no 'next'
        return [*lines, *_in_progress(ws, busy, last)]
    applying = stopped_applying(ws, entries)
    dirty = vcs.dirty_paths(ws.repo)
    if stopped := stopped_step(entries):  # where the last run stopped mid-round
        k = stopped.get("round")
        if applying == "moved":
            lines.append(
                f"last run stopped applying round {k}, accepted: the next run finishes it "
                "(do not commit or stash what git status shows: that would undo the round)"
            )
        elif applying == "pending":  # the kill came before main moved: what git status shows is not ours
            lines.append(
                f"last run stopped applying round {k}, accepted, before main moved: the next run finishes it"
                + ("; git stash the edits made since first, and git stash pop them after" if dirty else "")
            )
        else:
            lines.append(
                f"last run stopped in round {k}, its journal's last step '{stopped.get('phase')}' (nothing applied)"
            )
    if dirty:
        lines.append(
            f"uncommitted changes: {len(dirty)} path(s)"
            + {
                "moved": " (the unfinished checkout's)",
                "pending": " (yours: stash them before 'run', pop them after)",
            }.get(applying or "", " (commit or stash before 'run')")
        )
    lines += proposals.standing_lines(ws.repo, ws.root)
    where = ws.off_main()
    run = proposals.run_command(ws.repo, ws.root, _main_config(ws) if where else ws.cfg)
    q = shlex.quote(str(ws.root))
    lines.append(f"next: {before_run(ws, (dirty, applying))}{run}   |   harnessopt log {q}")
    return lines


def _best_score(ws: Workspace, best: ledger.Round, rounds: list[ledger.Round]) -> str:
    """ho/best's val score: its round's, else as the last round that started from the same skill/
    and harness/ measured it as its incumbent (round 0 has none of its own, and a config commit
    after init is the next round's parent: status said "not measured yet" beside rounds that had
    measured it (QA))."""
    if best.manifest.val_score is not None:
        return _fmt(best.manifest.val_score)
    agent = _agent_trees(ws, best.commit)
    for r in reversed(rounds):
        parent, score = r.manifest.parent, r.manifest.incumbent_score
        if (
            score is not None
            and parent
            and (parent == best.commit or (agent and _agent_trees(ws, parent) == agent))
        ):
            return f"{_fmt(score)} (measured as round {r.round}'s incumbent)"
    return "not measured yet"


def _agent_trees(ws: Workspace, commit: str) -> tuple[str, ...]:
    """The tree ids of skill/ and harness/ at ``commit`` (what the agent is; config aside)."""
    try:
        return tuple(ws.repo.git.rev_parse(f"{commit}:{p}") for p in EDITABLE_PATHS)
    except git.GitCommandError:
        return ()


def stopped_applying(ws: Workspace, entries: list[dict[str, Any]]) -> Literal["moved", "pending"] | None:
    """Did the last run stop applying an accepted round? "moved": main holds it, its checkout
    unfinished (what git status shows is that checkout's: the next run finishes it); "pending":
    killed before main moved (the next run moves it, once edits made since are stashed:
    ``ledger.recover``); None: no."""
    stopped = stopped_step(entries)
    if stopped is None or stopped.get("phase") != "applying":
        return None
    head = vcs.head_sha(ws.repo)
    return "moved" if head == stopped.get("commit") else "pending" if head == stopped.get("parent") else None


def before_run(ws: Workspace, known: tuple[list[str], str | None] | None = None) -> str:
    """What to do before ``harnessopt run`` would start (``"... then "``), or "": HEAD off main, or
    uncommitted changes (the run refuses both; an unfinished checkout's are the run's to finish;
    with an apply killed before main moved, the edits are stashed and popped after).
    ``known``: the dirty paths and `stopped_applying`, when the caller has them already."""
    if where := ws.off_main():
        return f"{vcs.git_in(ws.root)} checkout main (HEAD is {where}), then "
    if known is not None:
        dirty, applying = known
    else:
        dirty = vcs.dirty_paths(ws.repo)
        applying = stopped_applying(ws, ws.journal.entries()) if dirty else None
    if not dirty or applying == "moved":
        return ""
    return "git stash, then " if applying == "pending" else "commit or stash the changes, then "


def _main_config(ws: Workspace) -> Config:
    """harnessopt.yaml as main holds it (what the run after ``git checkout main`` reads), else the
    one checked out when main's does not read."""
    try:
        raw = yaml.safe_load(ws.repo.git.show(f"refs/heads/main:{CONFIG_NAME}")) or {}
        return parse_config(raw, f"main:{CONFIG_NAME}")
    except (git.GitCommandError, yaml.YAMLError, UserError):
        return ws.cfg


def interrupted_spend(
    ws: Workspace, entries: list[dict[str, Any]], recorded: set[int], idle: bool
) -> list[str]:
    """What attempts of rounds that never recorded spent, a line a round (``unrecorded_spend``)."""
    lines = []
    for k, (usd, calls, tokens, at_least) in sorted(unrecorded_spend(ws, entries, recorded, idle).items()):
        why = "; at least: the run was killed, and this is its last count" if at_least else ""
        if k in recorded:  # run again since, and recorded by the last attempt
            what, where = (
                f"attempt(s) of round {k}",
                f"not in its record, which counts the attempt that wrote it{why}",
            )
        else:
            what = f"round {k} (diagnosis)" if k == 0 else f"round {k}"  # round 0 records in no round
            where = f"not in any recorded round{why}"
        lines.append(
            f"interrupted {what} spent ${usd:.4f}, {calls} model call(s), {tokens:,} tokens ({where})"
        )
    return lines


def unrecorded_spend(
    ws: Workspace, entries: list[dict[str, Any]], recorded: set[int], idle: bool
) -> dict[int, tuple[float, int, int, bool]]:
    """What attempts of rounds that never recorded spent, by round: dollars, calls, tokens, and
    whether that is a lower bound (a killed run's last count). Interrupted rounds, ones that failed
    before their record, a round-0 diagnosis that wrote no proposal, and the attempts before the one
    that recorded a round run again (its record counts only the attempt that wrote it: a resumed
    round pays nothing twice, but what the interrupted attempt paid is paid). From the journal's
    ``spend`` lines, and when no command holds the workspace (``idle``) the live file a run killed
    outright left; a ``recorded`` round's last spend line is its record's."""
    killed = live_spend.left(ws.root) if idle else {}  # a run killed outright (SIGKILL)
    spends = [e for e in entries if e.get("phase") == "spend"] + [
        {"round": k, **v} for k, v in killed.items()
    ]
    last = {int(e["round"]): i for i, e in enumerate(spends)}
    unrecorded: dict[int, tuple[float, int, int]] = {}
    for i, e in enumerate(spends):
        if (k := int(e["round"])) not in recorded or i != last[k]:
            usd, calls, tokens = unrecorded.get(k, (0.0, 0, 0))
            more_calls, more_tokens, more_usd = spend_of(e)
            unrecorded[k] = (usd + more_usd, calls + more_calls, tokens + more_tokens)
    # a killed run's count is its keeper's last (seconds stale): still so once a run folded it in
    at_least = set(killed) | {int(e["round"]) for e in spends if e.get("killed")}
    return {k: (*v, k in at_least) for k, v in unrecorded.items()}


def measured_line(ws: Workspace) -> str:
    """What audit, ablate and replay spent, beside the rounds' cost ('' when none ran): their
    records alone held it, and status said $0.0000 after a $1.46 audit (QA)."""
    spent = ledger.measured_spend(ws.repo)
    if not spent:
        return ""
    parts = [
        f"{kind} x{int(row['records'])} ${row['cost_usd']:.4f} ({int(row['calls'])} calls, {int(row['tokens']):,} tokens)"
        for kind, row in spent.items()
    ]
    return "measuring commands recorded (not in the cost above): " + ", ".join(parts)


def _in_progress(ws: Workspace, holder: dict[str, Any], last: dict[str, Any] | None) -> list[str]:
    """What ``status`` says while another command holds the lock: who, since when, doing what."""
    since = holder.get("since")
    when = time.strftime("%H:%M:%S UTC", time.gmtime(float(since))) if isinstance(since, int | float) else "?"
    lines = [
        f"in progress: 'harnessopt {holder.get('command', '?')}' (pid {holder.get('pid', '?')} on "
        f"{holder.get('host', '?')}, since {when})"
    ]
    # the journal's last line, if this holder wrote it: audit, ablate and replay write none when
    # they start, and the line of a command that had ended was shown as theirs (QA)
    if last and isinstance(since, int | float) and float(last.get("t") or 0) >= float(since):
        ago = time.time() - float(last.get("t") or 0)
        lines.append(
            f"now: round {last.get('round')}, phase '{last.get('phase')}' ({ago:.0f} s ago, journal)"
        )
    again = f"next: wait for it (harnessopt status {shlex.quote(str(ws.root))} again), or stop it"
    if holder.get("command") == "run":  # the STOP file is read between a run's phases only
        lines.append(f"{again} cleanly: touch {shlex.quote(str(stop_path(ws.root)))}")
    else:  # a measuring command ends cleanly on Ctrl-C (exit 130), nothing half-written
        lines.append(f"{again} with Ctrl-C in its terminal, or kill -INT {holder.get('pid', 'PID')}")
    return lines


def rollback_of(ws: Workspace, commit: str | None) -> str:
    """``a rollback to round K`` when ``commit`` is one (the round after it started there), else ""."""
    if not commit:
        return ""
    try:
        data = ledger.manifest_data(str(ws.repo.commit(commit).message))
    except (ValueError, git.BadName):  # a commit gone (a rewritten history): nothing to say
        return ""
    if data.get("status") == "rollback" and isinstance(data.get("to_round"), int):
        return f"a rollback to round {data['to_round']}"
    return ""


def incumbent_line(ws: Workspace, records: list[ledger.Round] | None = None) -> str:
    """``incumbent: <main's commit> = round K`` (or what main's commit is when it is no round's:
    a rollback, the round-0 proposal, a manual commit); the incumbent is main's commit, which a run
    starts from, wherever HEAD was checked out."""
    records = ledger.rounds(ws.repo) if records is None else records
    head = vcs.head_sha(ws.repo)
    main = (
        ws.repo.git.rev_parse("--verify", "-q", "refs/heads/main")
        if vcs.ref_exists(ws.repo, "refs/heads/main")
        else head
    )
    at = next((r for r in records if r.commit == main), None)
    return (
        f"incumbent: {main[:10]}"
        + (f" = round {at.round}" if at else _not_a_round(ws, main))
        + (
            f" (main; HEAD is at {head[:10]}: a run starts only with main checked out)"
            if head != main
            else ""
        )
    )


def _not_a_round(ws: Workspace, head: str) -> str:
    if head in proposals.round0_commits(ws.repo):
        return " (the round-0 proposal or its decision; skill and harness unchanged by it)"
    rollback = rollback_of(ws, head)
    return f" ({rollback})" if rollback else " (a manual commit)"


def last_run_parts(ws: Workspace) -> dict[str, str]:
    """What the last run used (journal ``run_start``: sandbox, executor, target, optimizer); {}
    before any run recorded them."""
    start = last_run_start(ws.journal.entries())
    used = start.get("used") if start else None
    if not isinstance(used, dict):
        return {}
    order = ("sandbox", "executor", "target", "optimizer")  # the journal sorts its keys
    keys = [k for k in order if k in used] + sorted(set(used) - set(order))
    return {k: str(used[k]) for k in keys}


def last_run_settings(ws: Workspace) -> dict[str, Any]:
    """The settings the last run used (journal ``run_start``: mode, template, batch_size, epochs,
    ``-c`` included); {} before any run recorded them."""
    start = last_run_start(ws.journal.entries())
    settings = start.get("settings") if start else None
    return dict(settings) if isinstance(settings, dict) else {}


def projected_vs_spent(ws: Workspace) -> list[str]:
    """The last run's projection (journal ``run_start``) beside what its rounds spent."""
    entries = ws.journal.entries()
    starts = [i for i, e in enumerate(entries) if e.get("phase") == "run_start" and e.get("projected")]
    if not starts:
        return []
    p = entries[starts[-1]]["projected"]
    done = {int(e["round"]) for e in entries[starts[-1] :] if e.get("phase") == "recorded"}
    spent = [r.manifest for r in ledger.past_rounds(ws.repo) if r.round in done]
    calls = sum(u.calls for m in spent for u in m.tokens.values())
    tokens = sum(u.input + u.output for m in spent for u in m.tokens.values())
    guessed = sum(u.estimated_calls for m in spent for u in m.tokens.values())
    cost = sum(m.cost_usd or 0.0 for m in spent)
    # the round-0 diagnoses it wrote (harness and joint mode): recorded on their proposal commits
    diagnoses = 0
    for e in entries[starts[-1] :]:
        if e.get("phase") == "round0_proposal" and e.get("commit"):
            try:
                data = ledger.manifest_data(str(ws.repo.commit(str(e["commit"])).message))
            except (ValueError, git.BadName):  # a commit gone (a rewritten history): nothing to count
                continue
            more_calls, more_tokens, more_cost = spend_of(data)
            calls, tokens, cost, diagnoses = (
                calls + more_calls,
                tokens + more_tokens,
                cost + more_cost,
                diagnoses + 1,
            )
    wall = sum(m.wall_s or 0.0 for m in spent)
    where = f"{len(spent)} round(s)" + (f" and {diagnoses} round-0 diagnosis(es)" if diagnoses else "")
    if not spent and not diagnoses:  # running, or stopped before any record: a percentage would say -100%
        off = " (no round of it recorded yet)"
    else:  # calls, tokens and time against the projection; fewer rounds than projected said so (QA)
        shares = [
            f"{(got - p[key]) / p[key]:+.0%} {label}"
            for got, key, label in (
                (calls, "calls", "calls"),
                (tokens, "tokens", "tokens"),
                (wall, "wall_s", "time"),
            )
            if p.get(key) and (key != "wall_s" or spent)
        ]
        if len(spent) < (asked := int(p.get("rounds") or 0)):
            shares.append(f"{len(spent)} of the {asked} projected round(s) recorded")
        off = f" ({', '.join(shares)})" if shares else ""
    timed = f", ~{duration(p['wall_s'])}" if p.get("wall_s") else ""
    return [
        f"last run projected: {p.get('calls', 0)} calls, {p.get('tokens', 0)} tokens, "
        f"${p.get('cost_usd', 0.0):.4f}{timed} for {p.get('rounds', 0)} round(s) (from {p.get('basis', '?')})",
        f"last run spent:     {calls} calls, {tokens} tokens"
        + (f" (estimated, chars/4, for {guessed} calls whose upstream sent no usage)" if guessed else "")
        + f", ${cost:.4f}"
        + (f", {duration(wall)}" if spent else "")
        + f" in {where}{off}",
    ]


def _candidate_diff(ws: Workspace, r: ledger.Round, i: int) -> str:
    cands = r.manifest.search.candidates if r.manifest.search else []
    c = next((c for c in cands if c.name in (f"c{i}", f"s{i}")), None)  # a candidate, or an explore step
    if c is None:
        known = ", ".join(c.name[1:] for c in cands) or "none (it had one candidate: drop --candidate)"
        raise UserError(f"round {r.round} has no candidate {i}; its candidates: {known}")
    header = f"# round {r.round} candidate {c.name}: {'validated' if c.chosen else 'not validated'}"
    header += f" ({c.ref or 'no ref'}{' ' + c.commit[:10] if c.commit else ''})\n# {c.reason}\n"
    if c.verdict:
        header += f"# {judged(c.verdict, c.gate_alpha)}\n"
    if c.focus:
        header += f"# aimed at: {c.focus}\n"
    if c.violations:  # what it wrote outside the whitelist never reached its tree
        header += f"# discarded {len(c.violations)} write(s) outside the whitelist (not in this diff):\n"
        header += "".join(f"#   {path}\n" for path in c.violations)
    if not c.commit:  # ended at the checks without an edit: nothing was recorded
        return header + "# (no change to skill/ or harness/)\n"
    body = vcs.diff(ws.repo, r.manifest.parent or f"{c.commit}^", c.commit, EDITABLE_PATHS)
    return header + (body if body.strip() else "# (no change to skill/ or harness/)\n")
