"""What a long command shows while it runs, and the line each round ends with.

On a terminal (rich): one bar per phase of the round (rollout, incumbent, smoke, validation,
reruns; audit for ``harnessopt audit``) with its task count, ETA, running pass rate and tokens,
and the run's tokens and dollars so far; lines (the loop's messages, the optimizer's turns) print
above the bars. Elsewhere (CI, ``tee``, a file): plain lines, one per quarter of a phase and at
least every ``PLAIN_EVERY_S`` seconds, each with its ETA. The optimizer's turns are read from
its transcript (``.harnessopt/optimizer/optimizer-round-K.jsonl``) as it is written.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from harnessopt.ledger.manifest import objective_gates
from harnessopt.ledger.store import RoundManifest
from harnessopt.protocols import Task, TaskResult, Usage
from harnessopt.util.text import duration

PLAIN_EVERY_S = 30.0
POLL_S = 0.5
ARG_CHARS = 70
# -cI: one of several candidates (search.candidates); -sJ: a chain's step J (search.explore)
_TRANSCRIPT = re.compile(r"optimizer-round-(\d+)(-[cs]\d+)?\.jsonl$")


@dataclass
class PhaseCount:
    """Running counts of one phase (one bar)."""

    label: str
    total: int = 0
    done: int = 0
    planned: int = 0  # runs ``expect``ed and not started yet (counted in total already)
    passed: int = 0
    tokens: int = 0
    started: float = field(default_factory=time.monotonic)
    printed: float = field(default_factory=time.monotonic)
    who: str = ""  # the candidate whose runs come now, where a phase runs several (screening)

    @property
    def title(self) -> str:
        return f"{self.label} of {self.who}" if self.who else self.label

    def eta_s(self) -> float | None:
        if not self.done or self.done >= self.total:
            return None
        return (time.monotonic() - self.started) / self.done * (self.total - self.done)

    def stats(self) -> str:
        rate = f"pass {self.passed / self.done:.0%}" if self.done else "pass -"
        return f"{rate}, {_k(self.tokens)} tokens"


class RunProgress:
    """Progress of task runs (a ``rollout.runner.RunObserver``) and the lines of a run; plain output.

    ``say`` prints a line. ``bind`` gives it the run's usage (for tokens and dollars so far) and
    the optimizer's transcript directory, whose turns it then prints as they are written.
    """

    def __init__(self, console: Console):
        self.console = console
        self.phases: dict[str, PhaseCount] = {}
        self.round_no: int | None = None
        self._phase = ""
        self._usage: Callable[[], Usage] | None = None
        self._watcher: TranscriptWatcher | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ lines

    def say(self, msg: str) -> None:
        """Print a line, after the optimizer's turns written since the last poll: a turn is shown
        before any line said after it, however soon (the round's result, the next phase)."""
        self.catch_up()
        self._print(msg)

    def _print(self, msg: str) -> None:
        with self._lock:
            self.console.print(msg, markup=False, highlight=False)

    def ask(self, prompt: str) -> str:
        """A line typed at the terminal, after ``prompt`` as written (EOFError when stdin ends)."""
        self.catch_up()
        return input(prompt)

    def bind(self, usage: Callable[[], Usage], transcripts: Path | None = None) -> None:
        self._usage = usage
        if transcripts is not None:
            self._watcher = TranscriptWatcher(transcripts, self._print)
            self._watcher.start()

    def catch_up(self) -> None:
        if self._watcher is not None:
            self._watcher.poll()

    def unbind(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        self._usage = None

    def spent(self) -> str:
        if self._usage is None:
            return ""
        u = self._usage()
        return f"run: {_k(u.input_tokens + u.output_tokens)} tokens, ${u.cost_usd:.2f}"

    # ------------------------------------------------------------------ observer

    def started(
        self, label: str, tasks: Sequence[Task], round_no: int, epochs: Sequence[int], phase: str
    ) -> None:
        self._phase = phase
        count = self._count(round_no, phase)
        if phase == "screening" and count.who != label:  # several candidates, one after another:
            # each line counts its own runs, under its name (QA: unnamed, then named but summed)
            count = self.phases[phase] = PhaseCount(count.label, who=label)
        runs = len(tasks) * len(epochs)
        took = min(runs, count.planned)  # runs expected ahead are in the total already
        count.planned -= took
        count.total += runs - took
        self.refresh_bar(phase, count)

    def expect(self, round_no: int, phase: str, runs: int) -> None:
        """``runs`` more runs of ``phase`` are planned, started in batches later (validation's
        chunks, an A/A test's second arm): its total counts them now, so the end of a batch does
        not read as the end of the phase ("5/5" and then "6/9")."""
        count = self._count(round_no, phase)
        count.total += runs
        count.planned += runs

    def _count(self, round_no: int, phase: str) -> PhaseCount:
        if round_no != self.round_no:
            self.new_round(round_no)
        count = self.phases.get(phase)
        if count is None:
            # round 0 of a measuring command (replay, ablate) is no round: "reruns", not "round 0 reruns"
            prefix = f"round {round_no} " if phase != "audit" and (round_no or phase == "rollout") else ""
            count = self.phases[phase] = PhaseCount(f"{prefix}{phase}")
            self.add_bar(phase, count)
        return count

    def finished(self, label: str, result: TaskResult, done: int, total: int) -> None:
        count = self.phases[self._phase]
        count.done += 1
        count.passed += bool(result.passed)
        count.tokens += result.input_tokens + result.output_tokens
        self.update_bar(self._phase, count)

    def new_round(self, round_no: int) -> None:
        self.round_no = round_no
        self.phases = {}

    # ------------------------------------------------------------------ display (plain)

    def add_bar(self, phase: str, count: PhaseCount) -> None:
        return None

    def refresh_bar(self, phase: str, count: PhaseCount) -> None:
        """A batch started: nothing finished, so no line (a bar shows its new total)."""
        return None

    def update_bar(self, phase: str, count: PhaseCount) -> None:
        """A line at each quarter of the phase, at its end, and at least every PLAIN_EVERY_S."""
        if not count.done:
            return
        quarter = max(count.total // 4, 1)
        due = count.done % quarter == 0 or count.done == count.total
        if not due and time.monotonic() - count.printed < PLAIN_EVERY_S:
            return
        count.printed = time.monotonic()
        eta = count.eta_s()
        parts = [f"{count.title}: {count.done}/{count.total} tasks", count.stats()]
        parts += [x for x in (self.spent(), f"ETA {duration(eta)}" if eta is not None else "") if x]
        self.say(", ".join(parts))

    def close(self) -> None:
        self.unbind()


class LiveProgress(RunProgress):
    """On a terminal: rich bars, one per phase of the current round."""

    def __init__(self, console: Console):
        super().__init__(console)
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bars = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[stats]}"),
            console=console,
            transient=True,
        )
        self._ids: dict[str, Any] = {}
        self.bars.start()

    def _print(self, msg: str) -> None:
        self.bars.console.print(msg, markup=False, highlight=False)

    def ask(self, prompt: str) -> str:
        """With the bars stopped: while they drew, the prompt went through rich's stdout proxy,
        which read "[y]es" as markup and showed "es" (QA)."""
        self.bars.stop()
        try:
            return super().ask(prompt)
        finally:
            self.bars.start()

    def new_round(self, round_no: int) -> None:
        super().new_round(round_no)
        for task_id in self._ids.values():
            self.bars.remove_task(task_id)
        self._ids = {}

    def add_bar(self, phase: str, count: PhaseCount) -> None:
        self._ids[phase] = self.bars.add_task(count.label, total=0, stats="")

    def refresh_bar(self, phase: str, count: PhaseCount) -> None:
        self.update_bar(phase, count)

    def update_bar(self, phase: str, count: PhaseCount) -> None:
        stats = ", ".join(x for x in (count.stats(), self.spent()) if x)
        self.bars.update(
            self._ids[phase], description=count.title, total=count.total, completed=count.done, stats=stats
        )

    def close(self) -> None:
        super().close()
        self.bars.stop()


@contextmanager
def progress_for(console: Console) -> Iterator[RunProgress]:
    """Live bars when ``console`` is a terminal, plain lines otherwise; closed on the way out."""
    p = LiveProgress(console) if console.is_terminal else RunProgress(console)
    try:
        yield p
    finally:
        p.close()


# --------------------------------------------------------------------------- optimizer turns


class TranscriptWatcher:
    """Prints the optimizer's tool calls as its transcript files grow (a polling thread)."""

    def __init__(self, directory: Path, say: Callable[[str], None]):
        self.directory = Path(directory)
        self.say = say
        # What the transcripts held when the run started is not this run's, whatever their mtimes
        # say (a copied or restored workspace has new ones): reading starts at their ends. A file
        # that shrinks was written anew (a round run again after a crash truncates its transcript):
        # reading starts again at its beginning.
        self._offsets: dict[Path, int] = {}
        for path in self._transcripts():
            with contextlib.suppress(OSError):
                self._offsets[path] = path.stat().st_size
        self._stop = threading.Event()
        self._polling = threading.Lock()  # the thread's poll and a caller's catch-up print each line once
        self._thread = threading.Thread(target=self._loop, name="ho-transcripts", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.poll()  # the last lines written before the round ended

    def _loop(self) -> None:
        while not self._stop.wait(POLL_S):
            self.poll()

    def _transcripts(self) -> list[Path]:
        try:
            return sorted(self.directory.glob("optimizer-round-*.jsonl"))
        except OSError:
            return []

    def poll(self) -> None:
        with self._polling:
            self._poll()

    def _poll(self) -> None:
        for path in self._transcripts():
            try:
                with path.open("rb") as f:
                    if os.fstat(f.fileno()).st_size < self._offsets.get(path, 0):
                        self._offsets[path] = 0
                    f.seek(self._offsets.get(path, 0))
                    data = f.read()
            except OSError:
                continue
            complete = data[: data.rfind(b"\n") + 1]
            self._offsets[path] = self._offsets.get(path, 0) + len(complete)
            m = _TRANSCRIPT.search(path.name)
            for raw in complete.splitlines():
                for line in turn_lines(int(m.group(1)) if m else 0, raw, (m.group(2) or "")[1:] if m else ""):
                    self.say(line)


def turn_lines(round_no: int, raw: bytes, candidate: str = "") -> list[str]:
    """The lines one transcript event is shown as: a tool call (name and a short argument);
    ``candidate``: which of the round's several candidates the conversation proposes."""
    try:
        event = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return []
    if not isinstance(event, dict):
        return []
    who = f" candidate {candidate}" if candidate else ""
    head = f"round {round_no}{who} optimizer turn {event.get('turn', '?')}"
    if event.get("event") == "api_error":
        return [f"{head}: API error: {_short(str(event.get('error', '')))}"]
    if event.get("event") != "response":
        return []
    lines = []
    for block in event.get("content") or []:
        if isinstance(block, dict) and block.get("type") == "tool_use":
            lines.append(f"{head}: {block.get('name')}: {tool_argument(block.get('input'))}")
    return lines


def tool_argument(value: Any) -> str:
    """A short, one-line argument of a tool call: the command, or the editor's command and path."""
    if isinstance(value, dict):
        if "command" in value and "path" in value:
            return _short(f"{value['command']} {value['path']}")
        if "command" in value:
            return _short(str(value["command"]))
    return _short(json.dumps(value, sort_keys=True, default=str))


def _short(text: str) -> str:
    flat = " ".join(text.split())
    flat = "".join(c if c.isprintable() else "?" for c in flat)
    return flat if len(flat) <= ARG_CHARS else flat[: ARG_CHARS - 3] + "..."


# --------------------------------------------------------------------------- round summary


def _clipped(text: str, chars: int) -> str:
    """``text`` cut at a word's end with "...", never inside a number ("max_cost=0.01" read as 0)."""
    if len(text) <= chars:
        return text
    cut = text[: chars - 3]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut) + " ..."


def round_lines(m: RoundManifest) -> list[str]:
    """One summary line per round (status, val, Δ against the dead zone, fixed/broken, cost), and
    a line naming the writes outside the whitelist that were discarded, when there were any."""
    parts = [f"round {m.round} {m.status}"]
    if m.val_score is not None and (gates := objective_gates(m)):  # each family against its own zone
        each = ", ".join(
            f"{k} Δ {g['delta']:+.3f} vs dead zone {g['dead_zone']:.3f}" for k, g in gates.items()
        )
        parts.append(f"val {m.val_score:.3f} ({each})")
        parts.append(f"fixed {len(m.fixed)} / broken {len(m.broken)}")
    elif m.val_score is not None and m.delta is not None and m.dead_zone is not None:
        parts.append(f"val {m.val_score:.3f} (Δ {m.delta:+.3f} vs dead zone {m.dead_zone:.3f})")
        parts.append(f"fixed {len(m.fixed)} / broken {len(m.broken)}")
    else:
        parts.append(_clipped(m.reason.splitlines()[0], 120) if m.reason else "")
    calls = sum(u.calls for u in m.tokens.values())
    tokens = sum(u.input + u.output for u in m.tokens.values())
    guessed = sum(u.estimated_calls for u in m.tokens.values())
    said = f" (~ estimated for {guessed} calls)" if guessed else ""
    parts.append(f"{calls} calls, {_k(tokens)} tokens{said}, ${m.cost_usd or 0.0:.4f}")
    lines = [" | ".join(p for p in parts if p)]
    if m.violations:
        shown = ", ".join(m.violations[:5]) + (
            f" and {len(m.violations) - 5} more" if len(m.violations) > 5 else ""
        )
        lines.append(
            f"round {m.round}: discarded {len(m.violations)} write(s) outside the whitelist: {shown}"
        )
    return lines


def _k(n: float) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else f"{n:.0f}"
