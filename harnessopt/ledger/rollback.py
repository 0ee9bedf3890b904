"""Roll back: skill/ and harness/ as of an accepted round, restored in a new commit on main.

History is kept (nothing is reset or rewritten); the commit carries a manifest that says which
round it restored (``store.rollback_message``), and the journal records it.
"""

from __future__ import annotations

from harnessopt.errors import UserError
from harnessopt.ledger import store as ledger
from harnessopt.ledger import vcs
from harnessopt.util import interrupts
from harnessopt.workspace.core import EDITABLE_PATHS, Workspace


def rollback(ws: Workspace, k: int) -> str:
    """Restore skill/ and harness/ as of accepted round k in a new commit; history is kept."""
    r = ledger.find(ws.repo, k)
    if r.status not in ("accepted", "initial"):
        accepted = [str(x.round) for x in ledger.rounds(ws.repo) if x.status in ("accepted", "initial")]
        raise UserError(
            f"round {k} is {r.status}: it was never on main; roll back to an accepted round: {', '.join(accepted)}"
        )
    if vcs.dirty_paths(ws.repo):
        raise UserError(f"{ws.root} has uncommitted changes; commit or stash them before a rollback")
    repo, head = ws.repo, vcs.head_sha(ws.repo)
    sha = vcs.commit_paths_from(repo, head, r.commit, EDITABLE_PATHS, ledger.rollback_message(k, r.commit))
    if sha is None:
        return f"skill/ and harness/ already are as of round {k}; nothing to commit"
    # The commit is built aside; the journal line comes first, so a journal that cannot be written
    # refuses the rollback with main untouched, and main then moves in one step (a compare-and-swap
    # against the head read above), with Ctrl-C held until the checkout is done.
    ws.journal.write(k, "rollback", commit=sha)
    with interrupts.deferred():
        vcs.advance_main(repo, sha, head)
    return f"restored skill/ and harness/ as of round {k} in commit {sha[:10]}"
