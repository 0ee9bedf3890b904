"""Exceptions that the CLI turns into exit codes (one place: ``cli.main``)."""

from typing import Any


class UserError(Exception):
    """Bad input or a state the user must fix. Printed as one line; exit code 2; nothing changed."""


class RunCutShort(UserError):
    """A state the user must fix, found after the run recorded rounds (the workspace changed under
    it, say): ``results`` are those rounds, which the run's summary still reports."""

    def __init__(self, why: str, results: list[Any]):
        super().__init__(why)
        self.results = results


class HarnessoptError(Exception):
    """An internal failure that is not the user's fault (exit code 1)."""


class BudgetExceeded(HarnessoptError):
    """The run's model budget (calls, tokens or cost) is spent."""


def not_utf8(path: object, e: UnicodeDecodeError) -> str:
    """The one line for a file of the user's that is not UTF-8 text."""
    data = e.object if isinstance(e.object, bytes | bytearray) else b""
    line = data[: e.start].count(b"\n") + 1  # where an editor finds it (a byte offset alone did not say)
    return (
        f"{path} is not UTF-8 text ({e.reason} at line {line}, byte {e.start}); re-save it as UTF-8 "
        "(a file of a workspace can also be restored with git)"
    )
