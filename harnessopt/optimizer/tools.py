"""The optimizer's two client tools: ``bash`` and ``str_replace_based_edit_tool``.

Both act through the ``Shell`` the sandbox gives (``sandbox.shell(view)``: a scrubbed host
subprocess, or execs in the optimizer's container) and are confined to the view root. The editor
refuses anything outside the view (``..``, absolute paths elsewhere, any symlink on the way, FIFOs,
devices, files over 1 MiB); the error goes back to the model as an ``is_error`` tool result.
"""

from __future__ import annotations

import posixpath
import re
import time
from pathlib import Path
from typing import Any

from harnessopt.protocols import Shell
from harnessopt.util.text import elide

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
    """Host side of ``text_editor_20250728``: view, create, str_replace, insert (no undo_edit).

    The host only maps the tool's path to a view-relative one, lexically (it never resolves a
    path inside the view); every file operation is ``shell.edit``, done where the optimizer's
    commands run (in its container under Docker) by the runner's ``edit`` mode, which walks the
    path without following links and refuses FIFOs, devices and files over 1 MiB.
    """

    def __init__(
        self,
        root: Path,
        *,
        shell: Shell | None = None,
        aliases: tuple[str, ...] = (),
        output_cap: int = OUTPUT_CAP,
    ):
        self.root = Path(root).resolve()  # the host's own path of the view, resolved once
        if shell is None:
            from harnessopt.sandbox.local.sandbox import LocalShell

            shell = LocalShell(self.root)
        self.shell = shell
        # Absolute paths under these name the view: where the shell sees it (e.g. /view), the host path.
        roots = (
            *aliases,
            shell.view_root,
            str(self.root),
            *([str(root)] if Path(root).is_absolute() else []),
        )
        self.aliases = tuple(dict.fromkeys(a.rstrip("/") for a in roots if a.rstrip("/")))
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

    def relative(self, raw: Any) -> str:
        """The view-relative posix path a tool path names (``.`` for the root), or ToolError."""
        if not isinstance(raw, str) or not raw.strip():
            raise ToolError("'path' (a string) is required")
        text = raw.strip()
        for alias in self.aliases:
            if text == alias or text.startswith(alias + "/"):
                text = text[len(alias) :].lstrip("/") or "."
                break
        else:
            if text.startswith("/"):
                raise ToolError(
                    f"{raw} is outside the view; use paths relative to the view root {self.shell.view_root}"
                )
        rel = posixpath.normpath(text)
        if rel == ".." or rel.startswith("../"):
            raise ToolError(f"{raw} resolves outside the view; only files inside it can be used")
        return rel

    def _op(self, **request: Any) -> dict[str, Any]:
        reply = self.shell.edit(request)
        if not reply.get("ok"):
            raise ToolError(str(reply.get("error") or "the editor failed"))
        return reply

    def _read(self, rel: str) -> str:
        return str(self._op(op="read", path=rel)["text"])

    def _view(self, inp: dict[str, Any]) -> str:
        rel = self.relative(inp.get("path"))
        reply = self._op(op="view", path=rel)
        if reply.get("kind") == "dir":
            head = f"Files and directories up to 2 levels deep in {rel}, excluding hidden items:"
            return "\n".join([head, *map(str, reply.get("entries") or [])])
        lines = str(reply["text"]).split("\n")
        start, end = 1, len(lines)
        rng = inp.get("view_range")
        if rng is not None:
            if not (isinstance(rng, list) and len(rng) == 2 and all(isinstance(x, int) for x in rng)):
                raise ToolError("view_range must be [start_line, end_line] (end_line -1 = to the end)")
            start, end = rng[0], len(lines) if rng[1] == -1 else rng[1]
            if not 1 <= start <= len(lines) or end < start or end > len(lines):
                raise ToolError(f"view_range {rng} is out of range: the file has {len(lines)} lines")
        body = "\n".join(f"{i:6}\t{lines[i - 1]}" for i in range(start, end + 1))
        return f"Here's the content of {rel} with line numbers:\n{body}"

    def _create(self, inp: dict[str, Any]) -> str:
        rel = self.relative(inp.get("path"))
        text = inp.get("file_text")
        if not isinstance(text, str):
            raise ToolError("'file_text' (a string) is required for create")
        existed = self._op(op="write", path=rel, text=text).get("existed")
        return f"File {'overwritten' if existed else 'created'}: {rel}"

    def _replace(self, inp: dict[str, Any]) -> str:
        rel = self.relative(inp.get("path"))
        old, new = inp.get("old_str"), inp.get("new_str", "")
        if not isinstance(old, str) or old == "":
            raise ToolError("'old_str' (a non-empty string) is required for str_replace")
        if not isinstance(new, str):
            raise ToolError("'new_str' must be a string")
        text = self._read(rel)
        count = text.count(old)
        if count == 0:
            raise ToolError(f"No replacement was performed: old_str did not appear verbatim in {rel}.")
        if count > 1:
            lines = [text[: m.start()].count("\n") + 1 for m in re.finditer(re.escape(old), text)]
            raise ToolError(
                f"No replacement was performed: old_str occurs {count} times in {rel} "
                f"(lines {lines}); include more context to make it unique."
            )
        at = text.index(old)
        edited = text.replace(old, new, 1)
        self._op(op="write", path=rel, text=edited)
        first = text[:at].count("\n") + 1
        return f"The file {rel} has been edited.\n" + _snippet(edited, first, new.count("\n") + 1)

    def _insert(self, inp: dict[str, Any]) -> str:
        rel = self.relative(inp.get("path"))
        line = inp.get("insert_line")
        new = inp.get("insert_text", inp.get("new_str"))
        if not isinstance(new, str):
            raise ToolError("'insert_text' (a string) is required for insert")
        lines = self._read(rel).split("\n")
        if not isinstance(line, int) or not 0 <= line <= len(lines):
            raise ToolError(f"insert_line must be an integer in [0, {len(lines)}]")
        block = new[:-1] if new.endswith("\n") else new
        lines[line:line] = block.split("\n")
        edited = "\n".join(lines)
        self._op(op="write", path=rel, text=edited)
        return f"The file {rel} has been edited.\n" + _snippet(edited, line + 1, block.count("\n") + 1)


def _snippet(text: str, first: int, n: int, context: int = 3) -> str:
    lines = text.split("\n")
    lo, hi = max(1, first - context), min(len(lines), first + n - 1 + context)
    body = "\n".join(f"{i:6}\t{lines[i - 1]}" for i in range(lo, hi + 1))
    return f"Snippet (lines {lo}-{hi}):\n{body}"
