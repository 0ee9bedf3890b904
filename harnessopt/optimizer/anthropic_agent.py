"""The built-in optimizer: Claude edits the view through the Messages API tool-use loop.

One round is one conversation. The user message carries OPTIMIZE.md; the model answers with
``bash`` / ``str_replace_based_edit_tool`` calls, run through the sandbox's shell and confined to
the view, until it ends its turn (its final text is the summary) or a budget runs out (turns,
tokens, wall clock). API errors, including the gateway refusing a call past the run's budget, end the round
as data (``stopped_by="error"``), never as a traceback. The transcript is written as JSONL next
to, never inside, the view.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from harnessopt.config import Config, OptimizerConfig
from harnessopt.gateway.policy import reserve
from harnessopt.optimizer.tools import BASH_TOOL, EDITOR_TOOL, BashTool, EditorTool
from harnessopt.optimizer.view import transcript_stem
from harnessopt.protocols import Proposal, Shell, SupportsClose

if TYPE_CHECKING:  # the SDK is imported where it is used: a run imports it in the background
    import anthropic

SYSTEM_PROMPT = (
    "You improve an AI agent's skill from evidence. Your working directory is a copy of the skill, its "
    "harness and the trajectories of recent runs. Use the bash tool to explore (each call starts a fresh "
    "shell in that directory) and the str_replace_based_edit_tool for edits; paths are relative to it. "
    "Follow OPTIMIZE.md. When done, reply without tool calls: your summary, first line a one-line title."
)
MAX_OUTPUT_TOKENS = 8192  # per model call; the round's budget is cfg.max_tokens


# The CLI agents, whose calls ask the role's whole cap: Claude Code is told it
# (CLAUDE_CODE_MAX_OUTPUT_TOKENS: the claude-code preset and template set it) and asks it on newer
# models; a Codex call names none, and the gateway reserves the role's whole cap for it.
CLI_AGENTS = ("claude-code", "codex")


def first_call_too_dear(cfg: Config) -> str | None:
    """Why the run's budget cannot hold one call of its optimizer or of a CLI-agent target, or None.
    The gateway reserves a call's ``max_tokens`` plus a bound on its input before forwarding it
    (``gateway.policy.reserve``), and refuses the call when that does not fit: a budget below it
    would pay for the first round's rollouts and then fail that round at its first optimizer call
    (a claude-code target: at its first task). Priced on the smallest first call: the built-in
    optimizer's system prompt and tools with an empty brief; a CLI agent's (``claude-code``,
    ``codex``) at what it asks for with no input at all (its own prompt only adds). Asked before a
    run (and a dry run) spends anything; a ``command`` optimizer asks what it asks: not priced."""
    b = cfg.budget
    calls: list[tuple[str, str, int, dict[str, Any]]] = []  # (whose, model, max_tokens, body)
    if cfg.optimizer.backend == "anthropic":
        out = min(output_ask(b.optimizer_max_output_tokens), cfg.optimizer.max_tokens)
        system = {"system": SYSTEM_PROMPT, "tools": [BASH_TOOL, EDITOR_TOOL]}
        calls.append(("the optimizer", cfg.optimizer.model, out, system))
    elif cfg.optimizer.backend in CLI_AGENTS:
        whose = f"the optimizer ({cfg.optimizer.backend})"
        calls.append((whose, cfg.optimizer.model, b.optimizer_max_output_tokens, {}))
    if cfg.template in CLI_AGENTS:
        calls.append((f"the target ({cfg.template})", cfg.model.target, b.target_max_output_tokens, {}))
    for whose, model, out, extra in calls:
        body = {"model": model, "max_tokens": out, **extra, "messages": [{"role": "user", "content": ""}]}
        raw = json.dumps(body, separators=(",", ":")).encode()
        inp, need_usd = reserve(body, raw, out, cfg.price_table)
        for setting, limit, need in (
            ("max_tokens", b.max_tokens, float(out + inp)),
            ("max_cost", b.max_cost, need_usd),
        ):
            if limit is not None and need > limit:
                shown = f"${need:.4f}" if setting == "max_cost" else f"{need:,.0f} tokens"
                what = "its instructions and tools" if extra else "an empty prompt"
                return (
                    f"budget.{setting}={limit:g} cannot hold one call of {whose}: the gateway reserves "
                    f"its max_tokens ({out:,}) and its input (at least {inp:,} tokens: {what}) before "
                    f"it forwards it, {shown} or more"
                    f"{f' at the price of {model}' if setting == 'max_cost' else ''}; raise "
                    f"budget.{setting} (--{setting.replace('_', '-')})"
                )
    return None


def output_ask(cap: int | None) -> int:
    """The ``max_tokens`` each built-in optimizer call asks for: 8,192, or less where the role's
    cap (``budget.optimizer_max_output_tokens``) allows less (the gateway refuses a call asking
    more, so a lower cap failed every round at its first optimizer call)."""
    return min(MAX_OUTPUT_TOKENS, cap or MAX_OUTPUT_TOKENS)


class _Transcript:
    """Append-only JSONL record of the conversation, flushed per event (survives a crash)."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._f: TextIO = path.open("w", encoding="utf-8")

    def write(self, event: str, **data: Any) -> None:
        self._f.write(json.dumps({"event": event, "t": round(time.time(), 3), **data}, default=str) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class AnthropicOptimizer:
    """Optimizer backend ``anthropic``: a Claude tool loop over the view.

    ``client`` is built by the caller (gateway base_url, optimizer-role token), or is a function
    giving the client of round K, for a fresh gateway lease per round. ``shell_factory``
    makes the ``Shell`` for a view (``sandbox.shell``: local subprocess or Docker). Transcripts go to
    ``transcript_dir/optimizer-round-K.jsonl``, or next to the view when no directory is given.
    """

    name = "anthropic"

    def __init__(
        self,
        client: anthropic.Anthropic | Callable[[int], anthropic.Anthropic],
        model: str,
        cfg: OptimizerConfig,
        shell_factory: Callable[[Path], Shell],
        *,
        transcript_dir: Path | None = None,
        max_output_tokens: int = MAX_OUTPUT_TOKENS,
    ):
        self.client = client
        self.max_output_tokens = max_output_tokens
        self.model = model
        self.cfg = cfg
        self.shell_factory = shell_factory
        self.transcript_dir = transcript_dir

    def propose(
        self, view: Path, brief: str, round_no: int, *, transcript_path: Path | None = None
    ) -> Proposal:
        """Run one round's conversation in ``view``; edits stay in the view, the summary is returned."""
        view = Path(view).resolve()
        path = transcript_path or self._default_transcript(view, round_no)
        transcript = _Transcript(path)
        import anthropic  # loaded by then in a run (``optimizer.import_in_background``)

        client = self.client if isinstance(self.client, anthropic.Anthropic) else self.client(round_no)
        shell = self.shell_factory(view)
        try:
            loop = _Loop(self, client, view, shell, transcript)
            proposal = loop.run(brief)
        finally:
            if isinstance(shell, SupportsClose):
                shell.close()
        transcript.write(
            "end",
            stopped_by=proposal.stopped_by,
            turns=proposal.turns,
            input_tokens=proposal.input_tokens,
            output_tokens=proposal.output_tokens,
            summary=proposal.summary,
        )
        transcript.close()
        proposal.transcript_path = path
        return proposal

    def _default_transcript(self, view: Path, round_no: int) -> Path:
        if self.transcript_dir is not None:
            return Path(self.transcript_dir) / f"{transcript_stem(view, round_no)}.jsonl"
        return view.parent / f"{view.name}.{transcript_stem(view, round_no)}.jsonl"


class _Loop:
    """State of one round's conversation; ``run`` reads like the protocol it speaks."""

    def __init__(
        self,
        opt: AnthropicOptimizer,
        client: anthropic.Anthropic,
        view: Path,
        shell: Shell,
        transcript: _Transcript,
    ):
        self.opt, self.client, self.cfg, self.transcript = opt, client, opt.cfg, transcript
        self.bash = BashTool(shell, opt.cfg.bash_timeout_s)
        # Edits happen where the shell runs (its container); absolute paths as the shell sees the view.
        self.editor = EditorTool(view, shell=shell)
        self.deadline = time.monotonic() + opt.cfg.wall_s
        self.turns = self.input_tokens = self.output_tokens = 0
        self.last_text = ""

    def run(self, brief: str) -> Proposal:
        import anthropic

        user = (
            "Your task for this round is in OPTIMIZE.md in the working directory; it is repeated here.\n\n"
            + brief
        )
        messages: list[dict[str, Any]] = [{"role": "user", "content": user}]
        self.transcript.write(
            "start", model=self.opt.model, system=SYSTEM_PROMPT, tools=[BASH_TOOL, EDITOR_TOOL], user=user
        )
        while True:
            stop = self._budget_spent()
            if stop:
                return self._stopped(stop, f"{stop.replace('_', ' ')} spent after {self.turns} turns")
            try:
                resp = self._call(messages)
            except anthropic.APITimeoutError:  # the call took the rest of the wall clock
                self.transcript.write("api_error", turn=self.turns + 1, error="timed out at the wall clock")
                return self._stopped(
                    "wall_clock", f"wall clock spent after {self.turns} turns, a call timed out"
                )
            except anthropic.APIError as e:
                message = _api_error_text(e)
                self.transcript.write("api_error", turn=self.turns + 1, error=message)
                return self._proposal("error", f"optimizer stopped by an API error: {message}")
            self.turns += 1
            self.input_tokens += resp.usage.input_tokens
            self.output_tokens += resp.usage.output_tokens
            content = [b.model_dump(mode="json", exclude_none=True) for b in resp.content]
            self.transcript.write(
                "response", turn=self.turns, stop_reason=resp.stop_reason, content=content,
                usage={"input_tokens": resp.usage.input_tokens, "output_tokens": resp.usage.output_tokens},
            )  # fmt: skip
            text = "\n".join(b["text"] for b in content if b.get("type") == "text").strip()
            self.last_text = text or self.last_text
            messages.append({"role": "assistant", "content": content})
            tool_uses = [b for b in content if b.get("type") == "tool_use"]
            if tool_uses:
                messages.append({"role": "user", "content": [self._run_tool(b) for b in tool_uses]})
            elif resp.stop_reason == "max_tokens":
                messages.append(
                    {"role": "user", "content": "Your reply was cut off. Continue, more briefly."}
                )
            elif resp.stop_reason == "refusal":
                return self._proposal("error", "optimizer stopped: the model refused to continue")
            else:
                return self._proposal("done", text or "(the optimizer gave no summary)")

    def _stopped(self, kind: str, why: str) -> Proposal:
        """A turn a budget ended: the model's last words still describe the edits it made before."""
        note = f"(stopped: {why})"
        return self._proposal(kind, f"{self.last_text}\n\n{note}" if self.last_text else note)

    def _budget_spent(self) -> str | None:
        if self.turns >= self.cfg.max_turns:
            return "turn_budget"
        if self.input_tokens + self.output_tokens >= self.cfg.max_tokens:
            return "token_budget"
        if time.monotonic() >= self.deadline:
            return "wall_clock"
        return None

    def _call(self, messages: list[dict[str, Any]]) -> Any:
        remaining_tokens = self.cfg.max_tokens - self.input_tokens - self.output_tokens
        # No retries of the client's own: the gateway already retries upstream (its answers say
        # x-should-retry: false), and a retried call that stalls would wait the rest of the wall
        # clock again each time (three times wall_s with the SDK's default of 2).
        return self.client.with_options(max_retries=0).messages.create(
            model=self.opt.model,
            max_tokens=max(1, min(self.opt.max_output_tokens, remaining_tokens)),
            system=SYSTEM_PROMPT,
            tools=[BASH_TOOL, EDITOR_TOOL],  # type: ignore[list-item]
            messages=messages,  # type: ignore[arg-type]
            timeout=max(1.0, self.deadline - time.monotonic()),
        )

    def _run_tool(self, block: dict[str, Any]) -> dict[str, Any]:
        """Execute one tool_use block; every failure becomes an is_error tool_result."""
        name, tool_input = block.get("name"), block.get("input") or {}
        started = time.monotonic()
        if not isinstance(tool_input, dict):
            text, is_error = "Error: tool input must be an object", True
        elif name == BASH_TOOL["name"]:
            text, is_error = self.bash(tool_input, deadline=self.deadline)
        elif name == EDITOR_TOOL["name"]:
            text, is_error = self.editor(tool_input)
        else:
            text, is_error = (
                f"Error: unknown tool {name!r}; the tools are bash and str_replace_based_edit_tool",
                True,
            )
        self.transcript.write(
            "tool", turn=self.turns, id=block.get("id"), name=name, input=tool_input, output=text,
            is_error=is_error, wall_s=round(time.monotonic() - started, 3),
        )  # fmt: skip
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.get("id"), "content": text}
        if is_error:
            result["is_error"] = True
        return result

    def _proposal(self, stopped_by: str, summary: str) -> Proposal:
        return Proposal(
            summary=summary,
            turns=self.turns,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            stopped_by=stopped_by,
        )


def _api_error_text(e: anthropic.APIError) -> str:
    """One line: HTTP status (when there is one) and the server's message."""
    status = getattr(e, "status_code", None)
    body = getattr(e, "body", None)
    message = e.message
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        message = str(body["error"].get("message") or message)
    line = " ".join(str(message).split())
    return f"HTTP {status}: {line}" if status else line
