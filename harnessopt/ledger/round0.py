"""The round-0 proposal and a person's decision on it, recorded in git (docs/optimizer.md, "Round 0").

Both are commits on ``main`` (they change no skill or harness file, so main stays the incumbent):

* the proposal commit adds ``proposals/round-0.md`` and the seed harness's train trajectories it
  was written from; ``refs/harnessopt/proposal/round-0`` points at the latest one;
* the decision commit adds ``proposals/round-0.decision.md`` (decision, who, when, reason);
  ``refs/harnessopt/decision/round-0`` points at the latest one.

Their messages end with the ledger's manifest line (``ledger.store.message``: ``round: 0``,
``status: proposal | approved | rejected``). A decision applies to the proposal it names; a new
diagnosis after a rejection is a new proposal commit, and every earlier proposal and decision
stays in main's history. Nothing is force-moved: main advances by compare-and-swap.
"""

from __future__ import annotations

import getpass
import re
import shlex
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import git

from harnessopt.errors import UserError
from harnessopt.ledger import store as ledger
from harnessopt.ledger import vcs
from harnessopt.ledger.journal import Journal, last_run_start, stopped_step
from harnessopt.ledger.manifest import spend_of

if TYPE_CHECKING:
    from harnessopt.config import Config

PROPOSAL_PATH = "proposals/round-0.md"
DECISION_PATH = "proposals/round-0.decision.md"
PROPOSAL_REF = "refs/harnessopt/proposal/round-0"
DECISION_REF = "refs/harnessopt/decision/round-0"
Decision = Literal["pending", "approved", "rejected"]


@dataclass(frozen=True)
class Round0:
    """The latest round-0 proposal and what was decided about it."""

    commit: str  # the proposal commit
    text: str  # proposals/round-0.md as committed
    status: Decision
    reason: str = ""
    by: str = ""
    decision_commit: str | None = None
    mode: str = ""  # the mode the proposal was written in (harness or joint; "" before it was recorded)


def state(repo: git.Repo) -> Round0 | None:
    """The latest proposal and its decision; None when no round 0 was ever written."""
    if not vcs.ref_exists(repo, PROPOSAL_REF):
        return None
    commit = repo.commit(PROPOSAL_REF)
    text = _blob(commit, PROPOSAL_PATH)
    mode = str(ledger.manifest_data(str(commit.message)).get("mode", ""))
    if vcs.ref_exists(repo, DECISION_REF):
        d = repo.commit(DECISION_REF)
        data = ledger.manifest_data(str(d.message))
        if data.get("proposal") == commit.hexsha and data.get("status") in ("approved", "rejected"):
            return Round0(
                commit.hexsha,
                text,
                data["status"],
                str(data.get("reason", "")),
                str(data.get("by", "")),
                d.hexsha,
                mode,
            )
    return Round0(commit.hexsha, text, "pending", mode=mode)


def rejected(repo: git.Repo) -> list[tuple[str, str]]:
    """Every rejected proposal on main's history, oldest first: (its text, the reason given)."""
    out = []
    for c in repo.iter_commits("HEAD", paths=DECISION_PATH):
        data = ledger.manifest_data(str(c.message))
        if data.get("status") == "rejected" and data.get("proposal"):
            try:
                text = _blob(repo.commit(str(data["proposal"])), PROPOSAL_PATH)
            except (ValueError, git.BadName):
                continue
            out.append((text, str(data.get("reason", ""))))
    return list(reversed(out))


def plan_to_implement(repo: git.Repo) -> str | None:
    """The approved proposal while no round accepted after its approval has implemented it yet: a
    round that changed the harness (the plan diagnoses the seed harness; a skill-mode round after
    the approval does not implement it)."""
    st = state(repo)
    if st is None or st.status != "approved" or st.decision_commit is None:
        return None
    for r in ledger.accepted_along(repo, vcs.head_sha(repo)):
        touched_harness = any(p.startswith("harness/") for p in r.manifest.changed)
        if touched_harness and vcs.is_ancestor(repo, st.decision_commit, r.commit):
            return None
    return st.text


def run_command(repo: git.Repo, root: Path, cfg: Config) -> str:
    """``harnessopt run WS``: the command that goes on from here. After a run that stopped mid-round
    (Ctrl-C, a kill, a crash), with that run's ``-c`` settings (its flags as ``-c``): the run that
    resumes it reuses its cached proposals and runs only under the settings that made them (the
    plain command, without ``-c search.candidates=3``, called the optimizer again). With ``-c
    mode=M`` while a round-0 proposal written in a mode M that harnessopt.yaml does not set (a run
    of ``-c mode=joint``) is not yet implemented or rejected, or while such a run's diagnosis
    stopped before writing its proposal; with ``--unsafe-host-optimizer`` where
    ``rollout.sandbox: local`` would run the optimizer's tools on this host and nothing in the
    config accepts that (the run refuses without it)."""
    from harnessopt.config import apply_overrides, parse_assignment

    run = f"harnessopt run {shlex.quote(str(root))}"
    entries = Journal(root).entries()
    stopped = stopped_step(entries)
    start = last_run_start(entries) if stopped else None
    again = start.get("overrides") if start else None
    if isinstance(again, list) and again:
        try:
            cfg = apply_overrides(cfg, dict(parse_assignment(str(t)) for t in again))
            run += "".join(f" -c {shlex.quote(str(t))}" for t in again)
        except UserError:  # harnessopt.yaml changed since, so that they no longer apply
            pass
    st = state(repo)
    if (
        st is not None
        and st.mode
        and st.mode != cfg.mode
        and (st.status in ("pending", "rejected") or plan_to_implement(repo) is not None)
    ):
        run += f" -c mode={st.mode}"
    elif (mode := _stopped_diagnosis_mode(entries, stopped)) and mode != cfg.mode:
        run += f" -c mode={mode}"
    if start and stopped and isinstance(start.get("rounds"), int) and isinstance(stopped.get("round"), int):
        # the stopped round again, and the rest; a diagnosis (round 0) stopped before the first of
        # them, which --rounds does not count: all of them are left (QA: it said one more)
        left = int(start["round"]) + start["rounds"] - max(stopped["round"], int(start["round"]))
        if left > 1:  # the plain command runs one round of a run asked for more (QA)
            run += f" --rounds {left}"
    o = cfg.optimizer
    if cfg.rollout.sandbox == "local" and o.backend != "manual" and not o.unsafe_host:
        run += " --unsafe-host-optimizer"
    return run


def _stopped_diagnosis_mode(entries: list[dict[str, Any]], stopped: dict[str, Any] | None) -> str | None:
    """The mode of the last run when where it stopped (``stopped``, the journal's
    ``stopped_step``) is a round-0 diagnosis step: it stopped before its proposal, in the mode its
    ``run_start`` line records (``-c mode=M`` included; a journal older than the recorded
    overrides has only this)."""
    if not (stopped and stopped["round"] == 0 and stopped["phase"].startswith("round0")):
        return None
    start = last_run_start(entries)
    settings = start.get("settings") if start else None
    return str(settings["mode"]) if isinstance(settings, dict) and settings.get("mode") else None


def unused_plan(repo: git.Repo, mode: str) -> str | None:
    """One line when an approved, not yet implemented plan meets a run whose ``mode`` does not use it."""
    if mode in ("harness", "joint") or plan_to_implement(repo) is None:
        return None
    st = state(repo)
    made = st.mode if st is not None and st.mode else "harness or joint"
    return (
        f"the approved round-0 plan (written in {made} mode) is not used in {mode} mode: this run's "
        f"optimizer does not see it; run with -c mode={st.mode if st and st.mode else 'joint'} to implement it"
    )


def record_proposal(repo: git.Repo, text: str, trajectories: Path, data: dict[str, Any]) -> str:
    """Commit the proposal (and the train ``trajectories`` directory it read) on main."""
    parent = vcs.head_sha(repo)
    with tempfile.TemporaryDirectory(prefix="ho-proposal-") as tmp:
        overlay = Path(tmp)
        (overlay / "proposals").mkdir()
        (overlay / PROPOSAL_PATH).write_text(text, encoding="utf-8")
        shutil.copytree(trajectories, overlay / "trajectories")
        title = _title(text)
        body = f"Decide with: harnessopt approve WS | harnessopt reject WS --reason '...'\n\n{title}"
        msg = ledger.message(f"harnessopt round 0: proposal: {title[:60]}", body, data)
        sha = vcs.build_commit(repo, parent, overlay, ["proposals", "trajectories"], msg)
    vcs.advance_main(repo, sha, parent)
    vcs.set_ref(repo, PROPOSAL_REF, sha)
    return sha


def record_decision(
    repo: git.Repo, approve: bool, reason: str, by: str | None = None, run: str = "harnessopt run WS"
) -> Round0:
    """A person's decision on the pending proposal, as a commit on main; the new state. ``run``: the
    command that goes on from a decision already taken (``run_command``)."""
    st = state(repo)
    if st is None:
        raise UserError(f"there is no round-0 proposal to decide on; `{run}` writes one")
    if st.status != "pending":
        raise UserError(
            f"the round-0 proposal ({st.commit[:10]}) was already {st.status}; `{run}` continues from there"
        )
    if vcs.dirty_paths(repo):
        raise UserError(
            f"{repo.working_dir} has uncommitted changes; commit or stash them, then decide again"
        )
    status: Decision = "approved" if approve else "rejected"
    reason = " ".join(reason.split())
    if not approve and not reason:
        raise UserError("a rejection needs a reason: harnessopt reject WS --reason '...'")
    who = by or _who()
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    record = f"decision: {status}\nby: {who}\nat: {when}\nproposal: {st.commit}\nreason: {reason or '-'}\n"
    parent = vcs.head_sha(repo)
    data = {"version": ledger.MANIFEST_VERSION, "round": 0, "status": status, "proposal": st.commit}
    data.update(reason=reason, by=who, at=when)
    with tempfile.TemporaryDirectory(prefix="ho-decision-") as tmp:
        overlay = Path(tmp)
        vcs.export(repo, parent, ["proposals"], overlay)
        (overlay / "proposals").mkdir(exist_ok=True)
        (overlay / DECISION_PATH).write_text(record, encoding="utf-8")
        subject = f"harnessopt round 0: proposal {status}" + (f": {reason[:60]}" if reason else "")
        sha = vcs.build_commit(repo, parent, overlay, ["proposals"], ledger.message(subject, record, data))
    vcs.advance_main(repo, sha, parent)
    vcs.set_ref(repo, DECISION_REF, sha)
    return Round0(st.commit, st.text, status, reason, who, sha, st.mode)


def spend(repo: git.Repo) -> dict[str, Any]:
    """What round 0 spent on main's history: every diagnosis (a proposal commit) with its calls
    and dollars, as its manifest recorded them."""
    out: dict[str, Any] = {"diagnoses": 0, "calls": 0, "tokens": 0, "cost_usd": 0.0}
    try:
        commits = list(repo.iter_commits("HEAD", paths=PROPOSAL_PATH))
    except (git.GitCommandError, ValueError):
        return out
    for c in commits:
        data = ledger.manifest_data(str(c.message))
        if data.get("round") != 0 or data.get("status") != "proposal":
            continue
        calls, tokens, cost = spend_of(data)
        out["diagnoses"] += 1
        out["calls"] += calls
        out["tokens"] += tokens
        out["cost_usd"] += cost
    return out


def spend_line(repo: git.Repo) -> str | None:
    """``round 0 (diagnosis): ...`` for status, log and the report; None without a diagnosis."""
    s = spend(repo)
    if not s["diagnoses"]:
        return None
    return (
        f"round 0 ({'diagnoses' if s['diagnoses'] > 1 else 'diagnosis'}, {s['diagnoses']}): {s['calls']} model "
        f"call(s), {s['tokens']:,} tokens, ${s['cost_usd']:.4f}"
    )


def round0_commits(repo: git.Repo) -> set[str]:
    """The latest proposal and decision commits."""
    return {repo.commit(ref).hexsha for ref in (PROPOSAL_REF, DECISION_REF) if vcs.ref_exists(repo, ref)}


def standing_lines(repo: git.Repo, root: Path) -> list[str]:
    """``harnessopt status``: where round 0 stands (nothing when no proposal was written)."""
    st = state(repo)
    if st is None:
        return []
    made = f" (written in {st.mode} mode)" if st.mode else ""
    line = f"round 0: proposal {st.commit[:10]} {st.status}{made}" + (f" ({st.reason})" if st.reason else "")
    if st.status == "pending":
        q = shlex.quote(str(root))
        return [line, f"decide: harnessopt approve {q}   |   harnessopt reject {q} --reason '...'"]
    return [line]


def _blob(commit: git.Commit, path: str) -> str:
    try:
        return bytes(commit.tree[path].data_stream.read()).decode("utf-8", "replace")
    except KeyError:
        return ""


def _title(text: str) -> str:
    """The proposal's first line, without a "Round 0 proposal:" of its own (the commit says it)."""
    for line in text.splitlines():
        if line.strip():
            title = line.lstrip("# ").strip()
            title = re.sub(r"^round[ -]?0 proposal\s*[:.-]\s*", "", title, flags=re.IGNORECASE) or title
            return title[:200]
    return "round-0 proposal"


def _who() -> str:
    try:
        return f"{getpass.getuser()}@{socket.gethostname()}"
    except (OSError, KeyError):
        return "unknown"
