"""The CLI's rich console, which leaves a reader that went away (``| head``) to the CLI."""

from __future__ import annotations

import os
import sys

from rich.console import Console


class CliConsole(Console):
    """rich's ``Console``, but a broken pipe is raised as ``BrokenPipeError`` (``cli.main`` exits
    0 on it: the command did its work, the reader read what it wanted) instead of rich's own
    ``SystemExit(1)``, which made ``harnessopt init ... | head -1`` exit 1 with no word after the
    workspace was made."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        devnull = os.open(os.devnull, os.O_WRONLY)  # the interpreter's last flush goes nowhere
        os.dup2(devnull, sys.stdout.fileno())
        raise BrokenPipeError
