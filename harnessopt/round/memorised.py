"""The memorised-answer check of an accept: does the gain survive inputs it could not have seen?

After the gate accepts (and before the confirmation or the record), the val tasks the gate counted
as fixed are run again, ``checks.memorised_variants`` perturbed variants each, on both sides:

* every variant gets a fresh random id (``p-`` and 12 hex digits, drawn from the OS per round):
  a table keyed by task id misses it;
* its input is perturbed without changing its meaning: by the workspace's ``perturb.py`` when
  there is one (``perturb(task: dict, rng: random.Random) -> dict``, host side like scorer.py,
  hidden from harness and optimizer, sealed like it), else by the built-in perturbation: a string
  gets leading and trailing whitespace and one doubled space between two words; an object gets its
  keys in another order (recursively), its values unchanged. A table keyed
  by a hash of the input as given (in clear or encoded) misses every variant;
* the gold answer and metadata are kept; the scorer scores the variant as it is.

``gate.memorised.decide`` tests whether the candidate keeps ``checks.memorised_retain`` of its gain
on them (level ``checks.memorised_alpha``). ``reject`` turns the accept into a rejection, ``warn``
says it and keeps the accept, ``off`` runs nothing. What it cannot see: a table keyed on a
normalised input (whitespace collapsed, keys sorted) or on one field of an object survives the
built-in perturbation (a ``perturb.py`` that rewords the input is needed for that); a gain on
fewer fixed tasks than the
test needs (``min_tasks``) is not tested; a gain measured without fixed tasks (the secondary
metric) neither. docs/gate.md, "Memorised answers".
"""

from __future__ import annotations

import json
import os
import random
import re
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harnessopt.gate.bank import first_look
from harnessopt.gate.memorised import decide, gate_gains, min_tasks
from harnessopt.protocols import Announce, Outcomes, Task
from harnessopt.rollout.runner import outcomes
from harnessopt.round.context import RoundContext, Trail
from harnessopt.round.services import Services
from harnessopt.workspace.core import Workspace

HOOK_NAME = "perturb.py"
MEMORISED_EPOCH = 4 * 10**6  # the perturbed variants' runs (counted with the gate's reruns)
_SPACE = re.compile(r"(?<=\S) (?=\S)")

Perturb = Callable[[dict[str, Any], random.Random], dict[str, Any]]


def screen(
    ws: Workspace, svc: Services, rc: RoundContext, t: Trail, incumbent: Outcomes, say: Announce
) -> str | None:
    """The round's memorised step after an accept: records ``t.checks["memorised"]``; the reason
    to reject, or None."""
    cfg, d = svc.cfg.checks, t.decision
    if cfg.memorised == "off" or d is None or not d.accept or t.candidate is None:
        return None
    fixed = [x for x in d.fixed if any(v.id == x for v in rc.val)]
    # the gate's gains: against the incumbent's whole bank where the gate compared with it
    base = incumbent if svc.gate.bank_first_look else first_look(incumbent, svc.cfg.gate.epochs)
    gains = gate_gains(fixed, outcomes(t.cand_val), base)
    if len(gains) < min_tasks(cfg.memorised_alpha):  # cannot reject: spend nothing on it
        v = decide(gains, {}, {}, {}, alpha=cfg.memorised_alpha, retain=cfg.memorised_retain)
        return _recorded(ws, rc, t, v, cfg.memorised, say)
    seed = svc.store.seed(
        rc.k, "memorised"
    )  # a rerun after Ctrl-C draws the same variants: their runs are kept
    variants, of = perturbed_tasks(
        ws.root, [x for x in rc.val if x.id in gains], cfg.memorised_variants, seed
    )
    say(
        f"round {rc.k}: memorised-answer check: {len(gains)} fixed task(s) x {cfg.memorised_variants} "
        "perturbed variant(s), on both sides"
    )
    epochs = [MEMORISED_EPOCH]
    svc.runner.expect(rc.k, "reruns", 2 * len(variants))  # both sides: one count
    svc.runner.prefetch(
        rc.incumbent, [(x, MEMORISED_EPOCH) for x in variants], rc.k, phase="reruns"
    )  # in free slots
    cand = outcomes(svc.runner.run(t.candidate, variants, rc.k, epochs=epochs, phase="reruns"))
    inc = outcomes(svc.runner.run(rc.incumbent, variants, rc.k, epochs=epochs, phase="reruns"))
    v = decide(gains, cand, inc, of, alpha=cfg.memorised_alpha, retain=cfg.memorised_retain)
    return _recorded(ws, rc, t, v, cfg.memorised, say)


def _recorded(ws: Workspace, rc: RoundContext, t: Trail, v: Any, mode: str, say: Announce) -> str | None:
    rec = {"action": mode, **v.record(), "summary": v.summary()}
    if v.p is None or (v.collapsed and mode == "warn"):
        rec["note"] = f"memorised-answer check: {v.summary()}"
    t.checks["memorised"] = rec
    ws.journal.write(rc.k, "memorised", action=mode, p=v.p, collapsed=v.collapsed, summary=v.summary())
    say(f"round {rc.k}: memorised-answer check: {v.summary()}")
    if v.collapsed and mode == "reject":
        return f"memorised answers: the {v.summary()}; the candidate's gain is not earned"
    return None


def perturbed_tasks(
    root: Path, tasks: list[Task], n: int, seed: bytes | None = None
) -> tuple[list[Task], dict[str, list[str]]]:
    """``n`` perturbed variants of each task (module docstring) and the ids of each task's variants,
    drawn from ``seed`` (the round's: ``RoundStore.seed``; None: a fresh one)."""
    rng = random.Random(seed if seed is not None else os.urandom(16))
    hook = load_hook(root / HOOK_NAME)
    out: list[Task] = []
    of: dict[str, list[str]] = {}
    for task in tasks:
        for _ in range(n):
            new_id = f"p-{rng.getrandbits(48):012x}"
            data = {**task.public(), "answer": task.answer, "id": new_id}
            data = hook(json.loads(json.dumps(data)), rng) if hook else builtin(data, rng)
            out.append(Task(new_id, data["input"], task.answer, task.split, dict(data.get("metadata") or {})))
            of.setdefault(task.id, []).append(new_id)
    return out, of


def builtin(task: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """The built-in perturbation of a task's input: whitespace, and key order in objects."""
    return {**task, "input": _perturb_value(task["input"], rng)}


def _perturb_value(value: Any, rng: random.Random) -> Any:
    """A string input: its whitespace. An object: its keys' order, recursively, and nothing else
    (a field's value may be an identifier or code, whose whitespace is meaning)."""
    if isinstance(value, str):
        return _whitespace(value, rng)
    return _reordered(value, rng)


def _reordered(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        keys = list(value)
        rng.shuffle(keys)
        if len(keys) > 1 and keys == list(value):
            keys = keys[1:] + keys[:1]
        return {k: _reordered(value[k], rng) for k in keys}
    if isinstance(value, list):
        return [_reordered(v, rng) for v in value]
    return value


def _whitespace(text: str, rng: random.Random) -> str:
    gaps = [m.start() for m in _SPACE.finditer(text)]
    if gaps:
        at = rng.choice(gaps)
        text = text[:at] + " " + text[at:]
    return rng.choice((" ", "\n", "  ")) + text + rng.choice((" ", "\n", "\n\n"))


def load_hook(path: Path) -> Perturb | None:
    """The workspace's ``perturb(task, rng) -> task``, or None when there is no perturb.py."""
    if not path.is_file():
        return None
    module = types.ModuleType("harnessopt_perturb")
    module.__file__ = str(path)
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), module.__dict__)
    fn = getattr(module, "perturb", None)
    if not callable(fn):
        raise ValueError(f"{path} has no perturb(task, rng) function; define one or remove the file")
    return _checked(fn, path)


def _checked(fn: Callable[..., Any], path: Path) -> Perturb:
    def perturb(task: dict[str, Any], rng: random.Random) -> dict[str, Any]:
        got = fn(task, rng)
        if not isinstance(got, dict) or "input" not in got or not isinstance(got["input"], str | dict):
            raise ValueError(f"{path}: perturb() must return the task dict with an 'input' (str or object)")
        return {**task, "input": got["input"], "metadata": got.get("metadata", task.get("metadata"))}

    return perturb
