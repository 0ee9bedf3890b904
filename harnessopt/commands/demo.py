"""``harnessopt demo``: the whole loop offline on a bundled example, with a scripted model.

The example is a "world capitals" skill whose first version explains its answers, which the exact
match scorer fails. The scripted optimizer makes three proposals: a real fix (accepted), an edit
with no measurable gain that also writes outside the whitelist (rejected, violation discarded),
and a second real fix (accepted). Every model answer is replayed from ``data/demo/model.yaml``.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from harnessopt.config import Config, GateConfig, ModelConfig, OptimizerConfig, RolloutConfig, SearchConfig
from harnessopt.errors import HarnessoptError
from harnessopt.ledger.lock import workspace_lock
from harnessopt.reporting.log import print_log
from harnessopt.reporting.progress import progress_for
from harnessopt.round import driver
from harnessopt.workspace.core import Workspace, init_workspace

DEMO_DATA = Path(__file__).resolve().parents[1] / "data" / "demo"
DEMO_ROUNDS = 3
SCRIPTED_NOTICE = (
    "NOTE: this demo runs offline. Every model answer (the agent's and the optimizer's) is SCRIPTED, "
    "replayed from {script}; no real model is called."
)
HOST_OPTIMIZER_NOTICE = (
    "NOTE: where Docker is not used, the demo lets the optimizer's bash run on this host (it passes "
    "--unsafe-host-optimizer itself): the model is scripted, so there is no API key to reach."
)


def demo_config(sandbox: str) -> Config:
    return Config(
        model=ModelConfig(provider="scripted", target="scripted-demo-target", script="scripted_model.yaml"),
        rollout=RolloutConfig(sandbox=sandbox, batch_size=8, concurrency=2, timeout_s=60),
        optimizer=OptimizerConfig(backend="anthropic", model="scripted-demo-optimizer", max_turns=8),
        # the gate before issue 21 (no bank, second look 2, first-look share 0.2): the demo's
        # transcript and figures (docs, tests/reporting/test_report.py) were measured with it, and
        # the projection's priors do not yet foresee the second looks the new defaults spend on 14
        # val tasks (docs/gate.md, "Yield")
        gate=GateConfig(
            policy="paired",
            smoke=5,
            incumbent_epochs=1,
            second_look=2,
            first_look_share=0.2,
            confirm_moves_main=True,
        ),
        # one proposal a round, as the demo's script and its measured transcript have it
        search=SearchConfig(explore=0),
    )


def run_demo(target: Path, *, sandbox: str, say: Callable[[str], None], console: Console) -> int:
    init_workspace(
        target,
        DEMO_DATA / "skill",
        DEMO_DATA / "tasks.jsonl",
        template="chat",
        config=demo_config(sandbox),
        extra_files={"scripted_model.yaml": DEMO_DATA / "model.yaml"},
        announce=say,
    )  # first: a path it refuses is the demo's one line
    say(SCRIPTED_NOTICE.format(script=f"{target}/scripted_model.yaml"))
    if sandbox != "docker":
        say(HOST_OPTIMIZER_NOTICE)
    # The demo holds no key: its optimizer may run on the host. Not written to harnessopt.yaml,
    # so a later `harnessopt run` on this workspace asks for the flag itself.
    ws = Workspace.open(target, {"optimizer.unsafe_host": True})
    # its rounds hold the workspace's lock, as a run's do: a rollback or an audit meanwhile is refused
    with workspace_lock(ws.root, "demo", say), progress_for(console) as progress:  # bars on a terminal
        results = driver.run(ws, DEMO_ROUNDS, progress.say, progress=progress)
    print_log(ws, console)
    statuses = [r.status for r in results]
    say(SCRIPTED_NOTICE.format(script=f"{target}/scripted_model.yaml"))
    t = shlex.quote(str(target))  # a path with a space stays one word
    say(
        "where to look next:\n"
        f"  harnessopt log {t}            one row per round (add --json for scripts)\n"
        f"  harnessopt diff {t} 1         the accepted change of round 1 as a git diff\n"
        f"  harnessopt diff {t} 2         the rejected proposal, kept on refs/harnessopt/rejected/round-2\n"
        f"  ls {t}/trajectories; head -40 {t}/trajectories/australia.md\n"
        f"  harnessopt audit {t}          held-out gain on the test split (once)\n"
        f"  harnessopt rollback {t} 1     restore round 1 in a new commit"
    )
    if "accepted" not in statuses or "rejected" not in statuses:
        raise HarnessoptError(
            f"the demo expected accepted and rejected rounds, got {statuses}; please report this"
        )
    return 0
