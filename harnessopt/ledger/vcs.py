"""Git operations on a workspace (gitpython).

Candidates are never written into the main working tree while they are evaluated. A round's
record is built as a commit from an overlay directory through a private index, so the branch
moves in one atomic ``update-ref`` (accept) or never moves at all (reject / no-op / failed).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import git

# Interpreter droppings never enter a round's commit, whatever the overlay holds.
_JUNK_PATHSPECS = (":(exclude,glob)**/__pycache__/**", ":(exclude,glob)**/*.pyc")


def stage_as_recorded(repo: git.Repo, paths: Sequence[str]) -> None:
    """Stage ``paths`` of the working tree as a round's commit records them (``build_commit``):
    whatever an in-tree .gitignore says (a skill's own ``*.csv``), bytecode left out."""
    present = [p for p in paths if (Path(repo.working_dir) / p).exists()]
    if present:
        repo.git.add("-A", "-f", "--", *present, *_JUNK_PATHSPECS)


def git_in(path: Path | str) -> str:
    """``git -C PATH`` with PATH shell-quoted: the start of a git command a hint prints to paste."""
    return f"git -C {shlex.quote(str(path))}"


def open_repo(ws: Path) -> git.Repo:
    return git.Repo(ws)


IDENTITY = ("harnessopt", "harnessopt@localhost")  # a workspace's own, where git has none


def init_repo(ws: Path) -> tuple[git.Repo, bool]:
    """A new repository on ``main``, and whether it was given its own commit identity (git had
    none here: a workspace made where git has no identity must still commit)."""
    repo = git.Repo.init(ws, initial_branch="main")
    return repo, ensure_identity(repo)


def identity_note(root: Path) -> str:
    """What a command says when it gave the workspace its own commit identity."""
    name, email = IDENTITY
    return (
        f"note: git has no author identity here; {root} commits as {name} <{email}> from now on "
        "(git config user.name / user.email in it to change that)"
    )


def ensure_identity(repo: git.Repo) -> bool:
    """Give the workspace its own commit identity when git has none where it runs now (another
    HOME, a cluster's head, CI; the repo's own identity wins over any): otherwise the round's
    commit fails after the round was paid for. True when it was set."""
    try:
        repo.git.var("GIT_COMMITTER_IDENT")
        repo.git.var("GIT_AUTHOR_IDENT")
        return False
    except git.GitCommandError:  # "Author identity unknown": what commit-tree would fail on
        _set_identity(repo)
        return True


def _set_identity(repo: git.Repo) -> None:
    with repo.config_writer() as cw:
        cw.set_value("user", "name", IDENTITY[0])
        cw.set_value("user", "email", IDENTITY[1])


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
            repo.git.rm("-r", "--cached", "-f", "-q", "--ignore-unmatch", "--", *existing)
        present = [p for p in paths if (overlay / p).exists()]
        if present:
            # -f: an in-tree .gitignore must not make the commit differ from what was evaluated.
            repo.git.execute(
                ["git", f"--work-tree={overlay}", "add", "-A", "-f", "--", *present, *_JUNK_PATHSPECS],
                env={**os.environ, **env},
            )
        tree = repo.git.write_tree()
    sha = repo.git.commit_tree(tree, "-p", parent, "-m", message)
    problems = tree_differences(repo, sha, overlay, present)
    if problems:
        raise RecordMismatch(
            f"the commit would not hold the evaluated candidate ({'; '.join(problems[:3])}); nothing was recorded"
        )
    return str(sha)


def commit_paths_from(
    repo: git.Repo, parent: str, source: str, paths: Sequence[str], message: str
) -> str | None:
    """A commit on ``parent`` whose ``paths`` are as in commit ``source`` (a path absent there is
    removed) and the rest as in ``parent``; None when that is ``parent``'s tree already. Neither the
    working tree nor the real index nor any branch is touched."""
    with _private_index(repo) as env, repo.git.custom_environment(**env):
        repo.git.read_tree(parent)
        repo.git.rm("-r", "--cached", "-f", "-q", "--ignore-unmatch", "--", *paths)
        present = [p for p in paths if repo.git.ls_tree(source, "--", p)]
        if present:
            repo.git.restore("--staged", f"--source={source}", "--", *present)
        tree = repo.git.write_tree()
    if tree == repo.git.rev_parse(f"{parent}^{{tree}}"):
        return None
    return str(repo.git.commit_tree(tree, "-p", parent, "-m", message))


class RecordMismatch(Exception):
    """A built commit's tree differs from the overlay it was built from (e.g. a nested .git)."""


def tree_differences(repo: git.Repo, rev: str, overlay: Path, paths: Sequence[str]) -> list[str]:
    """How ``paths`` in ``rev``'s tree differ from ``overlay`` (names, modes, blob hashes; a gitlink
    or any other non-file entry is a difference). Interpreter droppings are left out on both sides."""
    want: dict[str, tuple[str, str]] = {}
    for top in paths:
        for f in sorted((overlay / top).rglob("*")) if (overlay / top).is_dir() else [overlay / top]:
            rel = f.relative_to(overlay).as_posix()
            if f.is_dir() and not f.is_symlink() or "__pycache__" in f.parts or rel.endswith(".pyc"):
                continue
            if f.is_symlink() or not f.is_file():
                want[rel] = ("special", "")
                continue
            data = f.read_bytes()
            blob = _blob_id(data)
            want[rel] = ("100755" if f.stat().st_mode & 0o100 else "100644", blob)
    have: dict[str, tuple[str, str]] = {}
    listing = repo.git.ls_tree("-r", "-z", "--full-tree", rev, "--", *paths) if paths else ""
    for entry in filter(None, listing.split("\0")):
        meta, name = entry.split("\t", 1)
        mode, kind, sha = meta.split()
        have[name] = (mode, sha) if kind == "blob" else (f"{kind} {mode}", sha)
    problems = [f"{n}: {have[n][0]}" for n in sorted(have) if have[n][0] not in ("100644", "100755")]
    problems += [f"{n} missing from the commit" for n in sorted(set(want) - set(have))]
    problems += [f"{n} not in the candidate" for n in sorted(set(have) - set(want))]
    problems += [f"{n} differs" for n in sorted(set(want) & set(have)) if want[n] != have[n]]
    return problems


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def main_unmovable(repo: git.Repo, parent: str) -> str | None:
    """Why ``main`` cannot move from ``parent`` to a round's commit now without touching the user's
    work, or None when it can: HEAD off main (the checkout would reset that branch), main past
    ``parent`` (a commit made meanwhile), or uncommitted edits (the checkout would reset them away)."""
    try:
        branch = str(repo.git.symbolic_ref("-q", "HEAD"))
    except git.GitCommandError:
        branch = ""
    if branch != "refs/heads/main":
        return f"HEAD moved to {branch.removeprefix('refs/heads/')}" if branch else "HEAD was detached"
    now = str(repo.git.rev_parse("refs/heads/main"))
    if now != parent:
        return f"main moved to {now[:10]} (a commit made during the run)"
    if dirty := dirty_paths(repo):
        more = f" and {len(dirty) - 3} more" if len(dirty) > 3 else ""
        return f"{', '.join(dirty[:3])}{more} had uncommitted edits"
    return None


def advance_main(repo: git.Repo, new: str, expected_old: str) -> None:
    """Move main to ``new`` atomically (only if it still is ``expected_old``), then check it out.
    The two git processes run in a session of their own: a Ctrl-C at the terminal goes to its
    whole process group, and killed between them git left main moved and the tree not checked
    out. A checkout that finds the index locked (a person's git, an IDE's ``git status``) is
    tried again for a few seconds."""
    _own_session(repo, "update-ref", "refs/heads/main", new, expected_old)
    for wait in (0.2, 0.5, 1.0, 2.0, 0.0):
        try:
            _own_session(repo, "reset", "--hard", new)
            return
        except git.GitCommandError as e:
            if not wait or "index.lock" not in str(e):
                raise
            time.sleep(wait)


def _own_session(repo: git.Repo, *args: str) -> None:
    repo.git.execute(["git", *args], start_new_session=True)


def set_ref(repo: git.Repo, ref: str, sha: str) -> None:
    repo.git.update_ref(ref, sha)


def delete_ref(repo: git.Repo, ref: str) -> None:
    """Remove ``ref`` if it exists."""
    if ref_exists(repo, ref):
        repo.git.update_ref("-d", ref)


def tag(repo: git.Repo, name: str, sha: str, *, move: bool = False) -> None:
    repo.create_tag(name, ref=sha, force=move)


def reset_hard(repo: git.Repo) -> None:
    """Return the working tree to HEAD; untracked files (not ignored ones) are removed too."""
    repo.git.reset("--hard", "HEAD")
    repo.git.clean("-fdq", "--", "skill", "harness", "trajectories")


def diff(repo: git.Repo, old: str, new: str, paths: Sequence[str] = ()) -> str:
    """``git diff --stat -p`` as git prints it: GitPython strips the output's last newline, and a
    patch without it is "corrupt" to ``git apply`` (``harnessopt diff WS K > p.patch``)."""
    args = ["--stat", "-p", old, new]
    if paths:
        args += ["--", *paths]
    out = str(repo.git.diff(*args))
    return out + "\n" if out else out


def export(repo: git.Repo, rev: str, paths: Sequence[str], dest: Path) -> None:
    """Write ``paths`` as of ``rev`` into a new ``dest`` straight from the object store.

    Not ``git archive``: an in-tree ``.gitattributes`` (``export-ignore``, ``export-subst``) must
    not make the audited skill differ from the committed one. Regular files only (modes 0644 or
    0755); a link or a gitlink in the tree is not written.
    """
    listing = repo.git.ls_tree("-r", "-z", "--full-tree", rev, "--", *paths)
    dest.mkdir(parents=True, exist_ok=True)
    for entry in filter(None, listing.split("\0")):
        meta, name = entry.split("\t", 1)
        mode, kind, sha = meta.split()
        parts = name.split("/")
        if kind != "blob" or mode not in ("100644", "100755") or any(p in ("", ".", "..") for p in parts):
            continue
        target = dest.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(
            target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755 if mode == "100755" else 0o644
        )
        with os.fdopen(fd, "wb") as f:
            f.write(repo.odb.stream(bytes.fromhex(sha)).read())


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
