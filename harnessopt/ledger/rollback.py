"""Roll back: skill/ and harness/ as of an accepted round, restored in a new commit on main.

History is kept (nothing is reset or rewritten); the commit carries a manifest that says which
round it restored (``store.rollback_message``), and the journal records it.
"""

from __future__ import annotations

from harnessopt.errors import UserError
from harnessopt.ledger import store as ledger
from harnessopt.ledger import vcs
from harnessopt.workspace.core import EDITABLE_PATHS, Workspace


def rollback(ws: Workspace, k: int) -> str:
    """Restore skill/ and harness/ as of accepted round k in a new commit; history is kept."""
    r = ledger.find(ws.repo, k)
    if r.status not in ("accepted", "initial"):
        accepted = [str(x.round) for x in ledger.rounds(ws.repo) if x.status in ("accepted", "initial")]
        raise UserError(
            f"round {k} was {r.status}; it never was on main. Roll back to an accepted round: {', '.join(accepted)}"
        )
    if vcs.dirty_paths(ws.repo):
        raise UserError(f"{ws.root} has uncommitted changes; commit or stash them before a rollback")
    repo = ws.repo
    repo.git.rm("-r", "-q", "--ignore-unmatch", "--", *EDITABLE_PATHS)
    repo.git.checkout(r.commit, "--", *EDITABLE_PATHS)
    if not repo.git.status("--porcelain"):
        return f"skill/ and harness/ already are as of round {k}; nothing to commit"
    repo.git.commit("-q", "-m", ledger.rollback_message(k, r.commit))
    ws.journal.write(k, "rollback", commit=vcs.head_sha(repo))
    return f"restored skill/ and harness/ as of round {k} in commit {vcs.head_sha(repo)[:10]}"
