"""The command and manual backends, the factory, and the rendered brief and history."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import anthropic
import pytest

from harnessopt.config import OptimizerConfig
from harnessopt.errors import UserError
from harnessopt.ledger.store import Round, RoundManifest
from harnessopt.optimizer import make_optimizer, render_brief, render_history
from harnessopt.optimizer.anthropic_agent import AnthropicOptimizer
from harnessopt.optimizer.command import CommandOptimizer
from harnessopt.optimizer.manual import ManualOptimizer
from harnessopt.protocols import GatewayLease
from harnessopt.sandbox.local import isolation


@pytest.fixture
def view(tmp_path: Path) -> Path:
    root = tmp_path / "view"
    (root / "skill").mkdir(parents=True)
    (root / "skill" / "SKILL.md").write_text("---\nname: s\ndescription: d\n---\nbody\n")
    return root


# --------------------------------------------------------------------------- command


def test_command_agent_gets_brief_on_stdin_and_the_lease_not_host_secrets(
    view: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_SERVICE_TOKEN", "host-secret")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "real-key")
    script = (
        "cat > brief.txt; env > env.txt; echo '- note' >> skill/SKILL.md; echo working; echo 'Title: terse'"
    )
    lease = GatewayLease("lease-token", "http://127.0.0.1:9", None)
    opt = CommandOptimizer(["bash", "-c", script], 10, lease_factory=lambda k: lease)  # the host's shell
    proposal = opt.propose(view, "# the brief\n", 4)
    assert proposal.stopped_by == "done"
    assert proposal.transcript_path is not None and "Title: terse" in proposal.transcript_path.read_text()
    assert proposal.summary == "working\nTitle: terse"
    assert (view / "brief.txt").read_text() == "# the brief\n"
    env = (view / "env.txt").read_text()
    assert "ANTHROPIC_API_KEY=lease-token" in env and "ANTHROPIC_BASE_URL=http://127.0.0.1:9" in env
    assert "host-secret" not in env and "real-key" not in env and "HARNESSOPT_ROUND=4" in env
    assert (view / "skill" / "SKILL.md").read_text().endswith("- note\n")


def test_command_agent_timeout_and_failure(view: Path) -> None:
    started = time.monotonic()
    slow = CommandOptimizer(["bash", "-c", "echo begun; sleep 30 & sleep 30"], 1.0).propose(view, "b", 1)
    assert slow.stopped_by == "wall_clock" and slow.summary == "begun"
    assert time.monotonic() - started < 5
    bad = CommandOptimizer(["bash", "-c", "cat >/dev/null; echo broken >&2; exit 7"], 10).propose(
        view, "b", 1
    )
    assert bad.stopped_by == "error" and "code 7" in bad.summary and "broken" in bad.summary


def test_command_agent_must_exist() -> None:
    with pytest.raises(UserError, match="not an executable"):  # looked for at once, where it will run
        CommandOptimizer(["no-such-agent-xyz", "-p"], 10)
    with pytest.raises(UserError, match="empty"):
        CommandOptimizer([], 10)
    # a preset's hint says what to do where the agent runs: on this host, install it (it said to
    # build an image, which --sandbox local does not use) (QA)
    hint = ("build the image", "install the CLI on this host")
    with pytest.raises(UserError, match="; install the CLI on this host$"):
        CommandOptimizer(["no-such-agent-xyz", "-p"], 10, missing_hint=hint)


@pytest.mark.skipif(not isolation.available("bwrap"), reason="bubblewrap cannot run here")
def test_an_agent_under_tmp_is_said_to_be_hidden_by_bwraps_own_tmp() -> None:
    """An executable file in /tmp on the host is not there under bwrap (its /tmp is its own): the
    refusal says so, where it only said 'not an executable' of a file that plainly is one (QA)."""
    import os
    import tempfile
    from functools import partial

    from harnessopt.sandbox.local.sandbox import LocalShell

    with tempfile.NamedTemporaryFile("w", dir="/tmp", suffix=".sh", delete=False) as f:
        f.write("#!/bin/sh\necho hi\n")
    os.chmod(f.name, 0o755)
    try:
        with pytest.raises(UserError, match="/tmp is the sandbox's own there: put the agent elsewhere"):
            CommandOptimizer([f.name], 10, shell_factory=partial(LocalShell, isolation_mode="bwrap"))
    finally:
        os.unlink(f.name)


# --------------------------------------------------------------------------- manual


def test_manual_returns_after_edits_settle(view: Path) -> None:
    said: list[str] = []
    opt = ManualOptimizer(settle_s=0.5, timeout_s=20, announce=said.append)

    def person() -> None:
        time.sleep(0.3)
        (view / "skill" / "SKILL.md").write_text("---\nname: s\ndescription: d\n---\nbetter\n")

    editor = threading.Thread(target=person)
    started = time.monotonic()
    editor.start()
    proposal = opt.propose(view, "brief", 2)
    editor.join()
    took = time.monotonic() - started
    assert proposal.summary == "manual edit" and proposal.stopped_by == "done"
    assert 0.7 <= took < 5
    assert str(view.resolve()) in said[0]


def test_manual_done_file_and_summary(view: Path) -> None:
    opt = ManualOptimizer(settle_s=30, timeout_s=20, announce=lambda s: None)

    def person() -> None:
        time.sleep(0.2)
        (view / "skill" / "SKILL.md").write_text("edited\n")
        (view / "SUMMARY.md").write_text("Shorter answers\n\nBecause t1 and t3 rambled.\n")
        (view / "DONE").touch()

    threading.Thread(target=person).start()
    started = time.monotonic()
    proposal = opt.propose(view, "brief", 2)
    assert time.monotonic() - started < 5  # DONE wins over the long settle time
    assert proposal.summary.splitlines()[0] == "Shorter answers"
    assert not (view / "DONE").exists() and not (view / "SUMMARY.md").exists()


def test_manual_times_out_without_edits(view: Path) -> None:
    (view / "skill" / "SKILL.md").read_text()  # reading is not an edit
    proposal = ManualOptimizer(settle_s=0.2, timeout_s=0.6, announce=lambda s: None).propose(view, "b", 1)
    assert proposal.summary == "no edits" and proposal.stopped_by == "wall_clock"


# --------------------------------------------------------------------------- factory, brief, history


def _client(round_no: int) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url="http://127.0.0.1:9/", api_key=f"lease-{round_no}")


def test_make_optimizer_chooses_by_backend() -> None:
    on_host = {"unsafe_host": True}  # no shell factory: the tools run on this host
    said: list[str] = []
    opt = make_optimizer(OptimizerConfig(**on_host), client_factory=_client, announce=said.append)
    assert isinstance(opt, AnthropicOptimizer)
    assert isinstance(
        make_optimizer(OptimizerConfig(backend="manual"), client_factory=_client), ManualOptimizer
    )
    cmd = make_optimizer(
        OptimizerConfig(backend="command", command=["bash", "-c", "true"], **on_host), client_factory=_client
    )
    assert isinstance(cmd, CommandOptimizer) and cmd.lease_factory is not None
    assert cmd.lease_factory(3) == GatewayLease("lease-3", "http://127.0.0.1:9", None)
    with pytest.raises(UserError, match="optimizer.command is empty"):
        make_optimizer(OptimizerConfig(backend="command", **on_host), client_factory=_client)
    with pytest.raises(UserError, match="known: anthropic, command, claude-code, codex, manual"):
        make_optimizer(
            OptimizerConfig.model_construct(backend="magic", unsafe_host=True), client_factory=_client
        )
    with pytest.raises(UserError, match="claude-code builds its own"):
        make_optimizer(
            OptimizerConfig(backend="claude-code", command=["claude", "-p"], **on_host),
            client_factory=_client,
        )


def test_an_optimizer_on_this_host_needs_the_unsafe_flag_and_says_what_it_exposes() -> None:
    for backend, extra in (("anthropic", {}), ("command", {"command": ["bash", "-c", "true"]})):
        with pytest.raises(UserError, match="--unsafe-host-optimizer") as refused:
            make_optimizer(OptimizerConfig(backend=backend, **extra), client_factory=_client)
        assert "\n" not in str(refused.value) and "--sandbox docker" in str(refused.value)
        said: list[str] = []
        cfg = OptimizerConfig(backend=backend, unsafe_host=True, **extra)
        make_optimizer(cfg, client_factory=_client, announce=said.append)
        assert len(said) == 1 and said[0].startswith("WARNING")
        for exposed in ("API key", "workspace", "tasks/", "gold answers", "network"):
            assert exposed in said[0], exposed
    # a CLI agent's way into Docker is its image variant: the plain image holds no such CLI (QA)
    for backend in ("claude-code", "codex"):
        with pytest.raises(UserError) as refused:
            make_optimizer(OptimizerConfig(backend=backend), client_factory=_client)
        assert (
            f"--sandbox docker -c rollout.image=harnessopt-sandbox:{backend} (after `harnessopt sandbox "
            f"build --with {backend}`)" in str(refused.value)
        )
    # In a container (the Docker sandbox's shell), nothing to accept and nothing to warn about.
    said = []
    make_optimizer(OptimizerConfig(), client_factory=_client, announce=said.append, shell_on_host=False)
    assert said == []


def test_brief_names_the_whitelist_budgets_and_rules() -> None:
    cfg = OptimizerConfig(max_turns=12, max_tokens=50_000, wall_s=600)
    text = render_brief(3, "skill", ["skill/**"], cfg, n_trajectories=8)
    assert text.startswith("# Round 3")
    for needle in (
        "`skill/**`",
        "12 model turns",
        "50,000 tokens",
        "600 s",
        "8 files",
        "task ids",
        "Never write task-specific",
        "first line is a one-line title",
        "front matter",
    ):
        assert needle in text, needle
    assert "may not change it" in text
    harness = render_brief(1, "harness", ["skill/**", "harness/**"], OptimizerConfig(backend="manual"))
    assert "`harness/**`" in harness and "harness/run.py" in harness and "model turns" not in harness


def test_history_lists_rounds_with_numbers() -> None:
    assert "first proposal" in render_history([])
    rows = [
        {
            "round": 1,
            "status": "accepted",
            "delta": 0.125,
            "dead_zone": 0.08,
            "summary": "Terse answers\n\nx",
        },
        {"round": 2, "status": "rejected", "delta": -0.02, "dead_zone": 0.09, "reason": "inside\nthe zone"},
        {"round": 3, "status": "noop", "summary": "y" * 5000},
    ]
    text = render_history(
        [Round(r["round"], r["status"], "c0ffee", "ref", RoundManifest.model_validate(r), "") for r in rows]
    )
    assert "## Round 1: accepted" in text and "delta +0.125, dead zone 0.080" in text
    assert "reason: inside the zone" in text and "Terse answers" in text
    assert "[...]" in text and len(text) < 3000


def test_the_optimizers_that_size_their_calls_are_told_the_roles_cap() -> None:
    """budget.optimizer_max_output_tokens: the built-in asked 8,192 and Claude Code 64,000 (on
    claude-opus-4-8) whatever the cap, and the gateway refused every call over it (QA)."""
    on_host = {"unsafe_host": True}
    built_in = make_optimizer(OptimizerConfig(**on_host), client_factory=_client, output_cap=1000)
    assert isinstance(built_in, AnthropicOptimizer) and built_in.max_output_tokens == 1000
    assert (
        make_optimizer(
            OptimizerConfig(**on_host), client_factory=_client, output_cap=64_000
        ).max_output_tokens
        == 8192
    )  # type: ignore[attr-defined]
    cc = make_optimizer(
        OptimizerConfig(backend="claude-code", **on_host), client_factory=_client, output_cap=20_000
    )
    assert isinstance(cc, CommandOptimizer) and cc.env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "20000"
