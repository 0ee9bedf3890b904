"""A round's candidates as ``search.state`` holds them, for tests that need no real round."""

from __future__ import annotations

from pathlib import Path

from harnessopt.optimizer.view import CopyBackResult
from harnessopt.protocols import Proposal
from harnessopt.rollout.runner import Candidate
from harnessopt.search.clusters import Focus
from harnessopt.search.state import Proposed


def proposed(name: str) -> Proposed:
    """Candidate (or step) ``name``: an edit of ``skill/NAME.md`` in a tree at ``/scratch/NAME``."""
    return Proposed(
        name,
        Focus(name),
        Proposal(f"Edit of {name}"),
        None,
        CopyBackResult([f"skill/{name}.md"]),
        Candidate(Path("/scratch") / name, name, "x"),
        None,
    )
