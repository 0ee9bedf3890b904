"""The optimizer's two client tools: ``bash`` and ``str_replace_based_edit_tool``.

Both are confined to the view root. The editor resolves every path and refuses anything that
lands outside the view (``..``, absolute paths elsewhere, symlinks pointing out); the error goes
back to the model as an ``is_error`` tool result. ``bash`` runs through the ``Shell`` the sandbox
gives (``sandbox.shell(view)``): a scrubbed host subprocess, or an exec in a container.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from harnessopt.protocols import Shell
from harnessopt.textutil import elide

BASH_TOOL = {"type": "bash_20250124", "name": "bash"}
EDITOR_TOOL = {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}
OUTPUT_CAP = 30_000  # characters of tool output shown to the model


def cap_output(text: str, cap: int = OUTPUT_CAP) -> str:
    """Keep the head and the tail of long output, with a marker saying how much was elided."""
    return elide(text, cap)


class BashTool:
    """Host side of ``bash_20250124``: input ``{command, restart?}``."""

    def __init__(self, shell: Shell, timeout_s: float):
        self.shell = shell
        self.timeout_s = timeout_s

    def __call__(self, tool_input: dict[str, Any], deadline: float | None = None) -> tuple[str, bool]:
        """Return (text for the model, is_error)."""
        if tool_input.get("restart"):
            return "The shell was restarted. (Every command runs in a fresh shell in the view root.)", False
        command = tool_input.get("command")
        if not isinstance(command, str) or not command.strip():
            return "Error: 'command' (a non-empty string) is required.", True
        timeout = self.timeout_s
        if deadline is not None:
            timeout = max(1.0, min(timeout, deadline - time.monotonic()))
        res = self.shell.run(command, timeout)
        text = res.output if res.output.strip() else "(no output)"
        if res.timed_out:
            return (
                f"{text}\n[timed out after {timeout:.0f} s; the command and its children were killed]",
                True,
            )
        if res.exit_code:
            return f"{text}\n[exit code {res.exit_code}]", True
        return text, False


class ToolError(Exception):
    """A bad tool call: its message goes back to the model as an ``is_error`` result."""


class EditorTool:
    """Host side of ``text_editor_20250728``: view, create, str_replace, insert (no undo_edit)."""

    def __init__(self, root: Path, *, aliases: tuple[str, ...] = (), output_cap: int = OUTPUT_CAP):
        self.root = Path(root).resolve()
        # Where a containerised bash sees the view (e.g. "/view"): absolute paths there map here.
        self.aliases = tuple(a.rstrip("/") for a in aliases if a.rstrip("/"))
        self.output_cap = output_cap

    def __call__(self, tool_input: dict[str, Any]) -> tuple[str, bool]:
        """Return (text for the model, is_error). Never raises for a bad call."""
        command = tool_input.get("command")
        handlers = {
            "view": self._view,
            "create": self._create,
            "str_replace": self._replace,
            "insert": self._insert,
        }
        try:
            if command == "undo_edit":
                raise ToolError(
                    "undo_edit is not available in text_editor_20250728; edit the file again instead."
                )
            if command not in handlers:
                raise ToolError(f"unknown command {command!r}; use one of: {', '.join(handlers)}")
            return cap_output(handlers[command](tool_input), self.output_cap), False
        except ToolError as e:
            return f"Error: {e}", True
        except (OSError, UnicodeError) as e:
            return f"Error: {type(e).__name__}: {e}", True

    def resolve(self, raw: Any) -> Path:
        """Map a tool path to a real path inside the view, or raise ToolError."""
        if not isinstance(raw, str) or not raw.strip():
            raise ToolError("'path' (a string) is required")
        text = raw.strip()
        for alias in self.aliases:
            if text == alias or text.startswith(alias + "/"):
                text = text[len(alias) :].lstrip("/") or "."
        p = Path(text)
        if p.is_absolute() and not p.is_relative_to(self.root):
            raise ToolError(f"{raw} is outside the view; use paths relative to the view root {self.root}")
        real = (self.root / p).resolve()
        if not real.is_relative_to(self.root):
            raise ToolError(f"{raw} resolves outside the view; only files inside it can be used")
        return real

    def _rel(self, p: Path) -> str:
        return p.relative_to(self.root).as_posix() or "."

    def _view(self, inp: dict[str, Any]) -> str:
        p = self.resolve(inp.get("path"))
        if p.is_dir():
            return self._listing(p)
        text = _read_text(p)
        lines = text.split("\n")
        start, end = 1, len(lines)
        rng = inp.get("view_range")
        if rng is not None:
            if not (isinstance(rng, list) and len(rng) == 2 and all(isinstance(x, int) for x in rng)):
                raise ToolError("view_range must be [start_line, end_line] (end_line -1 = to the end)")
            start, end = rng[0], len(lines) if rng[1] == -1 else rng[1]
            if not 1 <= start <= len(lines) or end < start or end > len(lines):
                raise ToolError(f"view_range {rng} is out of range: the file has {len(lines)} lines")
        body = "\n".join(f"{i:6}\t{lines[i - 1]}" for i in range(start, end + 1))
        return f"Here's the content of {self._rel(p)} with line numbers:\n{body}"

    def _listing(self, d: Path) -> str:
        out = [f"Files and directories up to 2 levels deep in {self._rel(d)}, excluding hidden items:"]
        for child in sorted(d.iterdir()):
            if child.name.startswith("."):
                continue
            out.append(self._rel(child) + ("/" if child.is_dir() and not child.is_symlink() else ""))
            if child.is_dir() and not child.is_symlink():
                out += [
                    self._rel(g) + ("/" if g.is_dir() else "")
                    for g in sorted(child.iterdir())
                    if not g.name.startswith(".")
                ]
        return "\n".join(out)

    def _create(self, inp: dict[str, Any]) -> str:
        p = self.resolve(inp.get("path"))
        text = inp.get("file_text")
        if not isinstance(text, str):
            raise ToolError("'file_text' (a string) is required for create")
        if p.is_dir():
            raise ToolError(f"{self._rel(p)} is a directory")
        existed = p.exists()
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
        return f"File {'overwritten' if existed else 'created'}: {self._rel(p)}"

    def _replace(self, inp: dict[str, Any]) -> str:
        p = self.resolve(inp.get("path"))
        old, new = inp.get("old_str"), inp.get("new_str", "")
        if not isinstance(old, str) or old == "":
            raise ToolError("'old_str' (a non-empty string) is required for str_replace")
        if not isinstance(new, str):
            raise ToolError("'new_str' must be a string")
        text = _read_text(p)
        count = text.count(old)
        if count == 0:
            raise ToolError(
                f"No replacement was performed: old_str did not appear verbatim in {self._rel(p)}."
            )
        if count > 1:
            lines = [text[: m.start()].count("\n") + 1 for m in _finditer(text, old)]
            raise ToolError(
                f"No replacement was performed: old_str occurs {count} times in {self._rel(p)} "
                f"(lines {lines}); include more context to make it unique."
            )
        at = text.index(old)
        p.write_text(text.replace(old, new, 1), encoding="utf-8")
        first = text[:at].count("\n") + 1
        return f"The file {self._rel(p)} has been edited.\n" + _snippet(p, first, new.count("\n") + 1)

    def _insert(self, inp: dict[str, Any]) -> str:
        p = self.resolve(inp.get("path"))
        line = inp.get("insert_line")
        new = inp.get("insert_text", inp.get("new_str"))
        if not isinstance(new, str):
            raise ToolError("'insert_text' (a string) is required for insert")
        text = _read_text(p)
        lines = text.split("\n")
        if not isinstance(line, int) or not 0 <= line <= len(lines):
            raise ToolError(f"insert_line must be an integer in [0, {len(lines)}]")
        block = new[:-1] if new.endswith("\n") else new
        lines[line:line] = block.split("\n")
        p.write_text("\n".join(lines), encoding="utf-8")
        return f"The file {self._rel(p)} has been edited.\n" + _snippet(p, line + 1, block.count("\n") + 1)


def _read_text(p: Path) -> str:
    if not p.exists():
        raise ToolError(f"{p.name} does not exist; create it first, or check the path with `ls`")
    if p.is_dir():
        raise ToolError(f"{p.name} is a directory; view it, or give a file path")
    return p.read_text(encoding="utf-8", errors="replace")


def _finditer(text: str, sub: str) -> list[re.Match[str]]:
    return list(re.finditer(re.escape(sub), text))


def _snippet(p: Path, first: int, n: int, context: int = 3) -> str:
    lines = p.read_text(encoding="utf-8", errors="replace").split("\n")
    lo, hi = max(1, first - context), min(len(lines), first + n - 1 + context)
    body = "\n".join(f"{i:6}\t{lines[i - 1]}" for i in range(lo, hi + 1))
    return f"Snippet (lines {lo}-{hi}):\n{body}"
