"""Git operations on a workspace (gitpython).

Candidates are never written into the main working tree while they are evaluated. A round's
record is built as a commit from an overlay directory through a private index, so the branch
moves in one atomic ``update-ref`` (accept) or never moves at all (reject / no-op / failed).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git

MANIFEST_PREFIX = "harnessopt-manifest: "
ROUND_TAG = "ho/round-{k}"
BEST_TAG = "ho/best"
RECORD_REF = "refs/harnessopt/{status}/round-{k}"
RECORD_STATUSES = ("rejected", "noop", "failed")
_ROUND_RE = re.compile(r"round-(\d+)$")
# Interpreter droppings never enter a round's commit, whatever the overlay holds.
_JUNK_PATHSPECS = (":(exclude,glob)**/__pycache__/**", ":(exclude,glob)**/*.pyc")


@dataclass(frozen=True)
class RoundRecord:
    """One round as git remembers it: where its commit is and the manifest in its message."""

    round: int
    status: str
    commit: str
    ref: str
    manifest: dict[str, Any]
    subject: str


def open_repo(ws: Path) -> git.Repo:
    return git.Repo(ws)


def init_repo(ws: Path) -> git.Repo:
    repo = git.Repo.init(ws, initial_branch="main")
    with repo.config_writer() as cw:
        # A workspace made on a machine without a global identity must still be committable.
        if not _has_identity(repo):
            cw.set_value("user", "name", "harnessopt")
            cw.set_value("user", "email", "harnessopt@localhost")
    return repo


def _has_identity(repo: git.Repo) -> bool:
    try:
        return bool(repo.git.config("user.email"))
    except git.GitCommandError:
        return False


def dirty_paths(repo: git.Repo) -> list[str]:
    """Tracked changes and untracked files (ignored ones, like .harnessopt/, do not count)."""
    out = repo.git.status("--porcelain", "--untracked-files=all")
    return [line[3:] for line in out.splitlines() if line.strip()]


def head_sha(repo: git.Repo) -> str:
    return repo.head.commit.hexsha


def tree_id(repo: git.Repo, rev: str, paths: Sequence[str]) -> str:
    """A content id for the given top-level paths at ``rev`` (used as a cache key)."""
    parts = []
    for p in paths:
        try:
            parts.append(repo.git.rev_parse(f"{rev}:{p}"))
        except git.GitCommandError:
            parts.append("-")
    return "-".join(x[:12] for x in parts)


@contextmanager
def _private_index(repo: git.Repo) -> Iterator[dict[str, str]]:
    fd, index = tempfile.mkstemp(prefix="ho-index-")
    os.close(fd)
    os.unlink(index)
    try:
        yield {"GIT_INDEX_FILE": index}
    finally:
        Path(index).unlink(missing_ok=True)


def build_commit(repo: git.Repo, parent: str, overlay: Path, paths: Sequence[str], message: str) -> str:
    """A commit whose tree is ``parent``'s with ``paths`` replaced by their copies in ``overlay``.

    Neither the working tree nor the real index nor any branch is touched.
    """
    with _private_index(repo) as env, repo.git.custom_environment(**env):
        repo.git.read_tree(parent)
        existing = [p for p in paths if repo.git.ls_files("--", p)]
        if existing:
            repo.git.rm("-r", "--cached", "-q", "--ignore-unmatch", "--", *existing)
        present = [p for p in paths if (overlay / p).exists()]
        if present:
            repo.git.execute(
                ["git", f"--work-tree={overlay}", "add", "-A", "--", *present, *_JUNK_PATHSPECS],
                env={**os.environ, **env},
            )
        tree = repo.git.write_tree()
    return repo.git.commit_tree(tree, "-p", parent, "-m", message)


def advance_main(repo: git.Repo, new: str, expected_old: str) -> None:
    """Move main to ``new`` atomically (only if it still is ``expected_old``), then check it out."""
    repo.git.update_ref("refs/heads/main", new, expected_old)
    repo.git.reset("--hard", new)


def set_ref(repo: git.Repo, ref: str, sha: str) -> None:
    repo.git.update_ref(ref, sha)


def tag(repo: git.Repo, name: str, sha: str, *, move: bool = False) -> None:
    repo.create_tag(name, ref=sha, force=move)


def reset_hard(repo: git.Repo) -> None:
    """Return the working tree to HEAD; untracked files (not ignored ones) are removed too."""
    repo.git.reset("--hard", "HEAD")
    repo.git.clean("-fdq", "--", "skill", "harness", "trajectories")


def manifest_message(subject: str, body: str, manifest: dict[str, Any]) -> str:
    text = subject.strip()
    if body.strip():
        text += "\n\n" + body.strip()
    return f"{text}\n\n{MANIFEST_PREFIX}{json.dumps(manifest, sort_keys=True)}\n"


def parse_manifest(message: str) -> dict[str, Any]:
    for line in reversed(message.splitlines()):
        if line.startswith(MANIFEST_PREFIX):
            try:
                data = json.loads(line[len(MANIFEST_PREFIX) :])
            except json.JSONDecodeError:
                return {}
            return data if isinstance(data, dict) else {}
    return {}


def round_records(repo: git.Repo) -> list[RoundRecord]:
    """Every recorded round: accepted ones by their tag, the others by their refs; sorted."""
    records: dict[int, RoundRecord] = {}
    for t in repo.tags:
        m = _ROUND_RE.search(t.name)
        if t.name.startswith("ho/round-") and m:
            records[int(m.group(1))] = _record(int(m.group(1)), "accepted", t.commit, t.path)
    for status in RECORD_STATUSES:
        for ref in _refs_under(repo, f"refs/harnessopt/{status}/"):
            m = _ROUND_RE.search(ref)
            if m and int(m.group(1)) not in records:
                records[int(m.group(1))] = _record(int(m.group(1)), status, repo.commit(ref), ref)
    return [records[k] for k in sorted(records)]


def _refs_under(repo: git.Repo, prefix: str) -> list[str]:
    out = repo.git.for_each_ref("--format=%(refname)", prefix)
    return [line for line in out.splitlines() if line]


def _record(k: int, status: str, commit: git.Commit, ref: str) -> RoundRecord:
    message = str(commit.message)
    manifest = parse_manifest(message)
    return RoundRecord(
        round=k,
        status=manifest.get("status", status) if k else "initial",
        commit=commit.hexsha,
        ref=ref,
        manifest=manifest,
        subject=message.splitlines()[0] if message else "",
    )


def diff(repo: git.Repo, old: str, new: str, paths: Sequence[str] = ()) -> str:
    args = ["--stat", "-p", old, new]
    if paths:
        args += ["--", *paths]
    return str(repo.git.diff(*args))


def show_text(repo: git.Repo, rev: str, path: str) -> str | None:
    try:
        return str(repo.git.show(f"{rev}:{path}"))
    except git.GitCommandError:
        return None


def export(repo: git.Repo, rev: str, paths: Sequence[str], dest: Path) -> None:
    """Write ``paths`` as of ``rev`` into ``dest`` (file modes kept), without touching the work tree."""
    import io
    import tarfile

    data = repo.git.execute(["git", "archive", "--format=tar", rev, "--", *paths], stdout_as_string=False)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")


def ref_exists(repo: git.Repo, ref: str) -> bool:
    try:
        repo.git.rev_parse("--verify", "--quiet", ref)
    except git.GitCommandError:
        return False
    return True


def is_ancestor(repo: git.Repo, older: str, newer: str) -> bool:
    try:
        repo.git.merge_base("--is-ancestor", older, newer)
    except git.GitCommandError:
        return False
    return True
