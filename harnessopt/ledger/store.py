"""The round ledger: the one reader and writer of the record of rounds.

Git is the source of truth for what happened: every round is a commit whose message
ends with a machine-readable manifest line. Accepted rounds are tagged ``ho/round-K`` on ``main``;
rejected, no-op and failed rounds live on ``refs/harnessopt/<status>/round-K``. This module owns
the manifest (``RoundManifest``, versioned, tolerant of keys written by other versions):
writing a round, reading rounds back, ``best()``, ``next_round()`` and ``recover()``. The
manifest's models are in ``ledger.manifest``.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import git
import gitdb.exc
from pydantic import BaseModel, ValidationError

from harnessopt.errors import HarnessoptError, UserError
from harnessopt.ledger import vcs
from harnessopt.ledger.index import CommitIndex
from harnessopt.ledger.journal import Journal, last_step
from harnessopt.ledger.manifest import MANIFEST_VERSION as MANIFEST_VERSION
from harnessopt.ledger.manifest import CandidateRecord as CandidateRecord
from harnessopt.ledger.manifest import OptimizerRecord as OptimizerRecord
from harnessopt.ledger.manifest import PhaseStats as PhaseStats
from harnessopt.ledger.manifest import RoleUsage as RoleUsage
from harnessopt.ledger.manifest import RoundManifest, Status
from harnessopt.ledger.manifest import SearchRecord as SearchRecord
from harnessopt.ledger.manifest import TriggerSide as TriggerSide
from harnessopt.ledger.manifest import TriggerStats as TriggerStats
from harnessopt.protocols import Announce
from harnessopt.util import interrupts
from harnessopt.util.text import visible

MANIFEST_PREFIX = "harnessopt-manifest: "
ROUND_TAG = "ho/round-{k}"
BEST_TAG = "ho/best"
RECORD_REF = "refs/harnessopt/{status}/round-{k}"
CANDIDATE_REF = "refs/harnessopt/candidates/round-{k}/{name}"
EXPLORE_HEAD_REF = "refs/harnessopt/explore/head"  # search.explore: a chain end the gate did not accept

RecordStatus = Literal["rejected", "noop", "failed"]
RECORD_STATUSES: tuple[RecordStatus, ...] = ("rejected", "noop", "failed")
_ROUND_RE = re.compile(r"round-(\d+)$")


@dataclass(frozen=True)
class Round:
    """One round as git remembers it: its commit, the ref that keeps it, its manifest."""

    round: int
    status: Status
    commit: str
    ref: str
    manifest: RoundManifest
    subject: str


# --------------------------------------------------------------------------- messages


def message(subject: str, body: str, data: BaseModel | dict[str, Any]) -> str:
    """A commit message: subject, body, and the manifest as the last line."""
    payload = data.model_dump(mode="json") if isinstance(data, BaseModel) else data
    text = visible(" ".join(subject.split()))  # one line, no escape sequence for `git log` to print
    if body.strip():
        text += "\n\n" + visible(body.strip())
    return f"{text}\n\n{MANIFEST_PREFIX}{json.dumps(payload, sort_keys=True)}\n"


def manifest_data(text: str) -> dict[str, Any]:
    """The raw manifest object of a commit message ({} when there is none or it is unreadable)."""
    for line in reversed(text.splitlines()):
        if line.startswith(MANIFEST_PREFIX):
            try:
                data = json.loads(line[len(MANIFEST_PREFIX) :])
            except json.JSONDecodeError:
                return {}
            return data if isinstance(data, dict) else {}
    return {}


def _manifest_of(k: int, status: Status, data: dict[str, Any]) -> RoundManifest:
    data.setdefault("round", k)
    data.setdefault("status", status)
    if k == 0:
        data["status"] = "initial"
    try:
        return RoundManifest.model_validate(data)
    except ValidationError:  # hand-edited or foreign: the ref still says what the round was
        return RoundManifest(round=k, status=status)


# --------------------------------------------------------------------------- reading


def rounds(repo: git.Repo) -> list[Round]:
    """Every recorded round, round 0 (the initial state) included, sorted by number.

    The refs are listed from git on every call (one ``git for-each-ref``); the commit messages
    come from the index in ``.harnessopt/`` (``ledger.index``), keyed by commit sha, and only the
    commits it does not hold yet are read from git. A commit's message never changes, so an entry
    cannot go stale; a moved, new or deleted ref is seen in the listing (docs/workspace.md)."""
    refs = _round_refs(repo)
    index = CommitIndex.load(repo)
    index.fill(repo, {sha for _, _, _, sha in refs}, manifest_data)
    found = [_round_of(k, status, sha, ref, *index.commits[sha]) for k, status, ref, sha in refs]
    return sorted(found, key=lambda r: r.round)


def rounds_from_git(repo: git.Repo) -> list[Round]:
    """``rounds`` read from git alone, commit by commit (no index): what the index must equal."""
    found: dict[int, Round] = {}
    for t in repo.tags:
        m = _ROUND_RE.search(t.name)
        if t.name.startswith("ho/round-") and m:
            k = int(m.group(1))
            found[k] = _round(k, "initial" if k == 0 else "accepted", t.commit, t.path)
    for status in RECORD_STATUSES:
        for ref in _refs_under(repo, f"refs/harnessopt/{status}/"):
            m = _ROUND_RE.search(ref)
            if m and int(m.group(1)) not in found:
                found[int(m.group(1))] = _round(int(m.group(1)), status, repo.commit(ref), ref)
    return [found[k] for k in sorted(found)]


def _round_refs(repo: git.Repo) -> list[tuple[int, Status, str, str]]:
    """(round, status, ref, commit sha) of every round ref; an accepted tag wins over a record ref."""
    out = repo.git.for_each_ref(
        "--format=%(refname) %(objectname) %(*objectname)", "refs/tags/ho/", "refs/harnessopt/"
    )
    tags: dict[int, tuple[int, Status, str, str]] = {}
    records: dict[int, tuple[int, Status, str, str]] = {}
    for line in out.splitlines():
        ref, sha, *peeled = line.split(" ")
        sha = peeled[0] if peeled and peeled[0] else sha  # an annotated tag: the commit it points at
        m = _ROUND_RE.search(ref)
        if not m:
            continue
        k = int(m.group(1))
        if ref.startswith("refs/tags/ho/round-"):
            tags[k] = (k, "initial" if k == 0 else "accepted", ref, sha)
        for status in RECORD_STATUSES:  # two records of one round: rejected, then noop, then failed
            if ref.startswith(f"refs/harnessopt/{status}/") and (
                k not in records or _RECORD_RANK[status] < _RECORD_RANK[records[k][1]]
            ):
                records[k] = (k, status, ref, sha)
    return list({**records, **tags}.values())


_RECORD_RANK: dict[str, int] = {status: i for i, status in enumerate(RECORD_STATUSES)}


def _round(k: int, status: Status, commit: git.Commit, ref: str) -> Round:
    text = str(commit.message)
    return _round_of(k, status, commit.hexsha, ref, text.splitlines()[0] if text else "", manifest_data(text))


def _round_of(k: int, status: Status, sha: str, ref: str, subject: str, data: dict[str, Any]) -> Round:
    manifest = _manifest_of(k, status, dict(data))
    return Round(k, manifest.status, sha, ref, manifest, subject)


def _refs_under(repo: git.Repo, prefix: str) -> list[str]:
    out = repo.git.for_each_ref("--format=%(refname)", prefix)
    return [line for line in out.splitlines() if line]


_ACCEPTED_SUBJECT = re.compile(r"harnessopt round (\d+): accepted")


def tag_problem(repo: git.Repo, main: str, finishing: str | None = None) -> str | None:
    """What is wrong with the round tags, with the ``git tag`` that mends it, or None. A tag
    ``ho/round-K`` (K >= 1) must point at round K's accepted commit: moved by hand, ``diff K``
    was a traceback and ``rollback K`` restored another commit as round K; and each accepted
    commit on ``main`` needs its tag: deleted, round K vanished from every listing and the next
    run recorded a second round K. ``finishing``: the accepted commit an interrupted run was
    applying (its tag is the next run's ``recover`` to write)."""
    out = repo.git.log(
        "--format=%H %s", "--extended-regexp", "--grep=^harnessopt round [0-9]+: accepted", main
    )
    accepted: dict[int, list[str]] = {}
    for line in out.splitlines():
        sha, _, subject = line.partition(" ")
        if m := _ACCEPTED_SUBJECT.match(subject):
            accepted.setdefault(int(m.group(1)), []).append(sha)
    tags = {k: sha for k, _, ref, sha in _round_refs(repo) if k > 0 and ref.startswith("refs/tags/ho/round-")}
    where = vcs.git_in(str(repo.working_dir))
    for k, sha in sorted(tags.items()):
        if sha in accepted.get(k, []) or _subject(repo, sha).startswith(f"harnessopt round {k}: accepted"):
            continue
        right = accepted.get(k, [])
        mend = (
            f"put it back with {where} tag -f {ROUND_TAG.format(k=k)} {right[0][:12]}"
            if len(right) == 1
            else f"delete it with {where} tag -d {ROUND_TAG.format(k=k)}"
        )
        return (
            f"the tag {ROUND_TAG.format(k=k)} points at {sha[:10]}, which is not round {k}'s accepted "
            f"commit (moved by hand?); {mend}"
        )
    for k, shas in sorted(accepted.items()):
        if k not in tags and shas[0] != finishing:
            return (
                f"round {k}'s tag {ROUND_TAG.format(k=k)} is missing (its accepted commit {shas[0][:10]} is on "
                f"main); restore it with {where} tag {ROUND_TAG.format(k=k)} {shas[0][:12]}"
            )
    return None


def _subject(repo: git.Repo, sha: str) -> str:
    return str(repo.git.log("-1", "--format=%s", sha))


def past_rounds(repo: git.Repo) -> list[Round]:
    """Rounds 1.. (round 0 is the initial state, not a round)."""
    return [r for r in rounds(repo) if r.round > 0]


def next_round(repo: git.Repo) -> int:
    return max((r.round for r in rounds(repo)), default=0) + 1


def find(repo: git.Repo, k: int) -> Round:
    recorded = rounds(repo)
    for r in recorded:
        if r.round == k:
            return r
    known = ", ".join(str(r.round) for r in recorded)
    raise UserError(f"round {k} is not recorded in {repo.working_dir}; recorded rounds: {known}")


def best(repo: git.Repo) -> Round:
    """The round ``ho/best`` points at (round 0 until a round is accepted). With the tag deleted
    (by hand: status and audit were a traceback, and every accepted round after it failed), the
    round it would point at: main's accepted round with the highest val score whose gain no
    confirmation contradicted, else round 0; the next accepted round that beats it tags it again."""
    try:
        sha = repo.commit(BEST_TAG).hexsha
    except (gitdb.exc.BadName, ValueError):
        recorded = rounds(repo)
        kept = [
            r
            for r in accepted_along(repo, vcs.head_sha(repo), recorded)
            if r.manifest.val_score is not None
            and (r.manifest.confirmation is None or r.manifest.confirmation.confirmed)
        ]
        if kept:
            return max(kept, key=lambda r: (r.manifest.val_score or 0.0, r.round))
        return next(r for r in recorded if r.round == 0)
    for r in rounds(repo):
        if r.commit == sha:
            return r
    return _round(-1, "accepted", repo.commit(sha), BEST_TAG)


# --------------------------------------------------------------------------- writing


def record_other(repo: git.Repo, parent: str, overlay: Path, paths: list[str], m: RoundManifest) -> str:
    """A rejected, no-op or failed round: its commit on ``refs/harnessopt/<status>/round-K``."""
    sha = vcs.build_commit(repo, parent, overlay, paths, _round_message(m))
    vcs.set_ref(repo, RECORD_REF.format(status=m.status, k=m.round), sha)
    if not vcs.dirty_paths(repo):  # never wipe edits a user made mid-run; start_round reports them
        vcs.reset_hard(repo)
    return sha


def record_accepted(
    repo: git.Repo,
    journal: Journal,
    parent: str,
    overlay: Path,
    paths: list[str],
    m: RoundManifest,
    *,
    new_best: bool,
) -> str:
    """An accepted round: one commit, tagged, then ``main`` moved by one compare-and-swap.

    The round's tag is set before ``main`` moves, so at every point a SIGKILL can land ``main`` is
    either the parent or a tagged round; ``recover`` finishes the rest from the journal's
    ``applying`` line (the swap, the checkout, ``ho/best``)."""
    sha = vcs.build_commit(repo, parent, overlay, paths, _round_message(m))
    tag = ROUND_TAG.format(k=m.round)
    with interrupts.deferred():
        if why := vcs.main_unmovable(repo, parent):  # the caller checked; this closes the gap since
            raise MainMoved(m.round, why)
        journal.write(m.round, "applying", commit=sha, parent=parent, new_best=new_best)
        vcs.tag(repo, tag, sha, move=True)
        try:
            vcs.advance_main(repo, sha, parent)
        except git.GitCommandError as e:  # main moved in the last milliseconds: the swap refused
            if vcs.head_sha(repo) != sha:  # no round's tag on a commit main never held
                repo.git.tag("-d", tag)
                raise MainMoved(m.round, "main moved") from e
            # main holds the round, the checkout failed: never a failed round, the next run finishes it
            raise CheckoutUnfinished(m.round, repo.working_dir, e) from e
        if new_best:
            vcs.tag(repo, BEST_TAG, sha, move=True)
    return sha


class CheckoutUnfinished(HarnessoptError):
    """An accepted round is on main, but git could not check it out (the journal's ``applying``
    line stands: ``recover`` finishes it). Not a failed round: nothing about it is to be undone."""

    def __init__(self, k: int, root: object, e: Exception):
        super().__init__(
            f"round {k} was accepted and main holds it, but git could not check it out "
            f"({str(e).strip().splitlines()[-1][:200]}); run `harnessopt run {shlex.quote(str(root))}` to "
            "finish it (do not commit the files git status shows: that would undo the round)"
        )


class MainMoved(HarnessoptError):
    """An accepted round's commit could not go on main: the user moved main, HEAD or the tree."""

    def __init__(self, k: int, why: str):
        super().__init__(f"round {k} was not applied: {why} during the round")
        self.why = why


def record_candidate(
    repo: git.Repo, parent: str, overlay: Path, paths: list[str], k: int, c: CandidateRecord, summary: str
) -> tuple[str, str]:
    """One candidate of round k on ``refs/harnessopt/candidates/round-K/NAME`` (main untouched);
    returns (ref, commit). Its message carries the candidate's record as the manifest."""
    title = c.title[:60] or c.reason[:60]
    text = message(f"harnessopt round {k} candidate {c.name}: {title}", f"{c.reason}\n\n{summary}", c)
    sha = vcs.build_commit(repo, parent, overlay, paths, text)
    ref = CANDIDATE_REF.format(k=k, name=c.name)
    vcs.set_ref(repo, ref, sha)
    return ref, sha


def _round_message(m: RoundManifest) -> str:
    title = m.title[:72] if m.summary else m.reason[:72]
    return message(f"harnessopt round {m.round}: {m.status}: {title}", f"{m.reason}\n\n{m.summary}", m)


def is_new_best(repo: git.Repo, m: RoundManifest) -> bool:
    """Does an accepted round with manifest ``m`` beat ``ho/best`` on val? Never when runs that did
    not select it failed to confirm its gain (``confirmation``)."""
    if m.confirmation is not None and not m.confirmation.confirmed:
        return False
    current = best(repo)
    if current.commit == m.parent:
        return True
    score = current.manifest.val_score
    return score is None or (m.val_score or 0.0) > score


INITIAL_SUBJECT = "harnessopt round 0: initial workspace"


def initial_message(skill_name: str, n_tasks: int) -> str:
    data = {
        "version": MANIFEST_VERSION,
        "round": 0,
        "status": "initial",
        "skill": skill_name,
        "tasks": n_tasks,
    }
    return message(INITIAL_SUBJECT, "", data)


def tag_initial(repo: git.Repo) -> None:
    sha = vcs.head_sha(repo)
    vcs.tag(repo, ROUND_TAG.format(k=0), sha)
    vcs.tag(repo, BEST_TAG, sha)


def rollback_message(k: int, to_commit: str) -> str:
    return message(
        f"harnessopt rollback to round {k}", "", {"status": "rollback", "to_round": k, "to_commit": to_commit}
    )


# --------------------------------------------------------------------------- recovery


def recover(repo: git.Repo, journal: Journal, say: Announce) -> None:
    """Before a run: finish our own interrupted apply, or refuse a workspace with a user's edits.
    The apply's step is the journal's last but for the spend lines the round's way out wrote."""
    last: dict[str, Any] = last_step(journal.entries()) or {}
    head = vcs.head_sha(repo)
    if last.get("phase") == "applying" and last.get("commit") != head and last.get("parent") == head:
        if dirty := vcs.dirty_paths(repo):  # the checkout would reset them away
            raise UserError(
                f"{repo.working_dir}: round {last.get('round')} was being applied when the last run "
                f"stopped, and {dirty[0]} has uncommitted edits since; git stash them, run again to "
                "finish the round, then git stash pop"
            )
        vcs.advance_main(repo, str(last["commit"]), head)  # the kill came before the swap: finish it
        head = str(last["commit"])
    if last.get("phase") == "applying" and last.get("commit") == head:
        vcs.reset_hard(repo)  # main moved, the checkout may not have finished
        k = int(last["round"])
        vcs.tag(repo, ROUND_TAG.format(k=k), head, move=True)
        if last.get("new_best"):
            vcs.tag(repo, BEST_TAG, head, move=True)
        journal.write(k, "recorded", status="accepted", commit=head, recovered=True)
        say(f"round {k} had been accepted when the last run stopped; its checkout is now complete")
    dirty = vcs.dirty_paths(repo)
    if dirty:
        more = f" and {len(dirty) - 1} more" if len(dirty) > 1 else ""
        raise UserError(
            f"{repo.working_dir} has uncommitted changes ({dirty[0]}{more}); commit or stash them, then run again"
        )


def accepted_along(repo: git.Repo, tip: str, recorded: list[Round] | None = None) -> Iterator[Round]:
    """Accepted rounds (1..) in the history of ``tip``; ``recorded``: `rounds`, if read already."""
    for r in rounds(repo) if recorded is None else recorded:
        if r.round > 0 and r.status == "accepted" and vcs.is_ancestor(repo, r.commit, tip):
            yield r


def live_accepted(repo: git.Repo, tip: str) -> list[Round]:
    """The accepted rounds whose edits ``tip`` holds, oldest first: its first-parent history, where
    a rollback to round K goes on from round K's commit (the rounds it undid are not live, though
    they stay in the history ``accepted_along`` reads)."""
    accepted = {r.commit: r for r in past_rounds(repo) if r.status == "accepted"}
    live: list[Round] = []
    sha: str | None = tip
    seen: set[str] = set()
    while sha is not None and sha not in seen:
        seen.add(sha)
        if sha in accepted:
            live.append(accepted[sha])
        commit = repo.commit(sha)
        data = manifest_data(str(commit.message))
        if data.get("status") == "rollback" and isinstance(data.get("to_commit"), str):
            sha = data["to_commit"]  # what it restored: the rounds after it are undone
        else:
            sha = commit.parents[0].hexsha if commit.parents else None
    return sorted(live, key=lambda r: r.round)


AUDIT_REF = "refs/harnessopt/audit/{base}-{best}"  # docs/workspace.md, "Git": the audit of a pair
# where the versions from the package's layout change (2026-12-01) until the fix of 2026-12-06 wrote
# audits: read as recorded audits, so a pair audited there is not audited again
MOVED_AUDIT_REF = "refs/harnessopt/commands/audit/{base}-{best}"


def audit_refs(repo: git.Repo, base: str, best: str) -> list[str]:
    """The refs that record an audit of the pair (``base``, ``best``), at either place."""
    refs = (f.format(base=base[:12], best=best[:12]) for f in (AUDIT_REF, MOVED_AUDIT_REF))
    return [ref for ref in refs if vcs.ref_exists(repo, ref)]


# the records of the measuring commands, under these prefixes (docs/workspace.md, "Git")
MEASURED = {
    "audit": ("refs/harnessopt/audit/", "refs/harnessopt/commands/audit/"),
    "ablate": ("refs/harnessopt/ablate/",),
    "replay": ("refs/harnessopt/replay/",),
}


def record_measurement(repo: git.Repo, ref: str, at: str, message: str, earlier: Sequence[str] = ()) -> str:
    """A measuring command's record on ``ref``: a commit of ``at``'s tree, ``at`` its first parent,
    the records before it (``earlier``, and the one on ``ref`` already) the further ones: a second
    measurement of the same thing keeps the first in git, and its spend in ``measured_spend``."""
    prior = list(dict.fromkeys([*earlier, *([repo.commit(ref).hexsha] if vcs.ref_exists(repo, ref) else [])]))
    parents = [arg for sha in [at, *prior] for arg in ("-p", sha)]
    sha = str(repo.git.commit_tree(repo.commit(at).tree.hexsha, *parents, "-m", message))
    vcs.set_ref(repo, ref, sha)
    return sha


def measurement_records(repo: git.Repo, tips: Iterable[str]) -> list[git.Commit]:
    """The records at ``tips`` and every record they keep as further parents (a record's first
    parent is the state it measured), each once, a record after the ones it keeps: oldest first."""
    out: dict[str, git.Commit] = {}

    def visit(commit: git.Commit) -> None:
        if commit.hexsha not in out:
            for earlier in commit.parents[1:]:
                visit(earlier)
            out.setdefault(commit.hexsha, commit)

    for tip in tips:
        visit(repo.commit(tip))
    return list(out.values())


def measured_spend(repo: git.Repo) -> dict[str, dict[str, float]]:
    """What audit, ablate and replay spent, by command: records, calls, tokens and dollars, over
    every record (the ones a later record keeps as parents too)."""
    out: dict[str, dict[str, float]] = {}
    for kind, prefixes in MEASURED.items():
        tips = [ref for prefix in prefixes for ref in _refs_under(repo, prefix)]
        for commit in measurement_records(repo, tips):
            data = manifest_data(str(commit.message))
            row = out.setdefault(kind, {"records": 0, "calls": 0, "tokens": 0, "cost_usd": 0.0})
            row["records"] += 1
            row["cost_usd"] += float(data.get("cost_usd") or 0.0)
            for u in (data.get("tokens") or {}).values():
                if isinstance(u, dict):
                    row["calls"] += int(u.get("calls") or 0)
                    row["tokens"] += int(u.get("input") or 0) + int(u.get("output") or 0)
    return out


def audits(repo: git.Repo) -> list[dict[str, Any]]:
    """Every recorded audit (``refs/harnessopt/audit/*``, and where a few versions wrote them,
    ``MOVED_AUDIT_REF``): its report, oldest first, with its ref."""
    found = []
    prefixes = (f.split("{", 1)[0] for f in (AUDIT_REF, MOVED_AUDIT_REF))
    for ref in (ref for prefix in prefixes for ref in _refs_under(repo, prefix)):
        commit = repo.commit(ref)
        found.append((commit.committed_date, {**manifest_data(str(commit.message)), "ref": ref}))
    return [data for _, data in sorted(found, key=lambda x: x[0])]
