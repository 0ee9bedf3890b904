"""Text helpers used across the package: head+tail elision and YAML front matter.

One wording for elision everywhere: the middle of a long text becomes
``\\n[... N chars elided ...]\\n`` (``bytes`` when the cap counts bytes), so the optimizer and the
user learn one marker. Front matter is ``---\\nYAML\\n---\\nbody``; parsing it never lets a
hostile document escape as anything but a ``FrontMatterError`` (a ``ValueError``).
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import IO, Any, Literal

import yaml

FENCE = "---"
FrontMatterProblem = Literal["missing", "unclosed", "yaml", "not_mapping"]


# --------------------------------------------------------------------------- elision


def elision_marker(count: int, unit: str = "chars") -> str:
    """The line that stands for ``count`` elided units, with a newline on each side."""
    return f"\n[... {count} {unit} elided ...]\n"


def elide(text: str, limit: int, *, unit: str = "chars", keep: Literal["both", "tail"] = "both") -> str:
    """Keep at most ``limit`` characters of ``text``: its head and tail (or only its tail).

    The middle (or the front, with ``keep="tail"``) becomes one marker line saying how much went.
    """
    limit = max(limit, 0)
    if len(text) <= limit:
        return text
    if keep == "tail":
        return elision_marker(len(text) - limit, unit).lstrip("\n") + text[len(text) - limit :]
    head = limit // 2
    tail = limit - head
    return text[:head] + elision_marker(len(text) - limit, unit) + text[len(text) - tail :]


def tail(text: str, limit: int, *, unit: str = "chars") -> str:
    """The last ``limit`` characters of ``text``, after a marker saying how many came before."""
    return elide(text, limit, unit=unit, keep="tail")


def head_tail_of_file(source: Path | str | IO[bytes], cap: int, *, unit: str = "bytes") -> str:
    """Head and tail (``cap`` bytes in all) of a possibly huge file, without reading the middle.

    ``source`` is a path or a binary file object (read from its start). Bytes are decoded as
    UTF-8 with replacement, so a character cut at either edge shows as U+FFFD.
    """
    if isinstance(source, str | os.PathLike):
        with Path(source).open("rb") as f:
            return _head_tail(f, cap, unit)
    return _head_tail(source, cap, unit)


def _head_tail(f: IO[bytes], cap: int, unit: str) -> str:
    cap = max(cap, 0)
    size = f.seek(0, os.SEEK_END)
    f.seek(0)
    if size <= cap:
        return f.read().decode("utf-8", "replace")
    head_n = cap // 2
    tail_n = cap - head_n
    head = f.read(head_n)
    f.seek(size - tail_n)
    tail_bytes = f.read(tail_n)
    return (
        head.decode("utf-8", "replace")
        + elision_marker(size - cap, unit)
        + tail_bytes.decode("utf-8", "replace")
    )


# --------------------------------------------------------------------------- front matter


class FrontMatterError(ValueError):
    """Front matter is missing, unclosed, not YAML, or not a mapping (``problem`` says which)."""

    def __init__(self, problem: FrontMatterProblem, message: str, detail: str = ""):
        super().__init__(message)
        self.problem = problem
        self.detail = detail  # the first line of the YAML error, when problem == "yaml"


def split_front_matter(text: str) -> tuple[str | None, str]:
    """Split ``---\\nYAML\\n---\\nbody`` into (YAML text, body).

    Returns ``(None, text)`` when the text does not open with a ``---`` line (a leading BOM is
    ignored; ``\\r\\n`` line ends are fine). Raises ``FrontMatterError("unclosed")`` when the
    opening fence has no closing ``---`` line.
    """
    text = text.removeprefix("\ufeff")
    lines = text.split("\n")
    if lines[0].strip() != FENCE:
        return None, text
    for i in range(1, len(lines)):
        if lines[i].strip() == FENCE:
            return "\n".join(lines[1:i]), "\n".join(lines[i + 1 :])
    raise FrontMatterError("unclosed", "front matter is not closed by a '---' line")


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` that fails only with ``FrontMatterError("yaml")``.

    A hostile document can make PyYAML raise more than ``YAMLError`` (a 20,000-deep nesting
    exhausts the recursion limit), so every exception becomes one clean error.
    """
    try:
        return yaml.safe_load(text)
    except RecursionError:
        detail = "nested too deeply"
    except Exception as e:  # any parser failure is the document's fault
        lines = str(e).strip().splitlines()
        detail = lines[0] if lines else type(e).__name__
    raise FrontMatterError("yaml", f"front matter is not valid YAML ({detail})", detail)


def duplicate_key(raw_yaml: str) -> str | None:
    """The first key of a YAML mapping given twice, at any depth, as a dotted path (only the last
    value would count); None when every key is given once. For text that parsed already: a
    compose failure leaves the problem to the parse."""
    try:
        node = yaml.compose(raw_yaml, Loader=yaml.SafeLoader)
    except Exception:
        return None

    def walk(n: Any, at: str) -> str | None:
        if isinstance(n, yaml.SequenceNode):
            return next((d for i, x in enumerate(n.value) if (d := walk(x, f"{at}{i}."))), None)
        if not isinstance(n, yaml.MappingNode):
            return None
        seen: set[Any] = set()
        for key, value in n.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else None
            if name is not None and name in seen:
                return f"{at}{name}"
            if name is not None:
                seen.add(name)
            if found := walk(value, f"{at}{name}."):
                return found
        return None

    try:
        return walk(node, "")
    except RecursionError:  # nested past what a document of ours holds; the parse judges it
        return None


def read_front_matter(text: str) -> tuple[dict[str, Any], str]:
    """The front matter as a mapping (``{}`` when empty) and the body after it.

    Every problem is a ``FrontMatterError`` whose ``problem`` says what went wrong.
    """
    raw, body = split_front_matter(text)
    if raw is None:
        raise FrontMatterError("missing", "no front matter: the text does not start with a '---' line")
    data = load_yaml(raw)
    if data is None:
        return {}, body
    if not isinstance(data, dict):
        raise FrontMatterError("not_mapping", "front matter is not a mapping")
    return data, body


def parse_front_matter(text: str) -> dict[str, Any]:
    """The front matter of ``text`` as a mapping; ``FrontMatterError`` (a ValueError) otherwise."""
    return read_front_matter(text)[0]


# --------------------------------------------------------------------------- untrusted text

# C0 controls but tab and newline, DEL, C1 controls: escape sequences (OSC 52 clipboard writes,
# cursor moves), NUL (which git refuses in a message) and bidi/zero-width tricks stay visible.
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0))}
_CONTROL.update(
    {c: f"\\u{c:04x}" for c in (0x200B, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))}
)
_CONTROL[0x0D] = "\\r"


def visible(text: str, limit: int | None = None) -> str:
    """Untrusted text made safe for git, files and terminals: controls other than newline and tab
    are written out as ``\\xNN`` (so an escape sequence is shown, never executed), and the result
    is elided to ``limit`` characters when one is given."""
    out = text.translate(_CONTROL)
    return out if limit is None else elide(out, limit)


HIDDEN = "[expected value hidden]"


def redact(text: str, secret: str) -> str:
    """``text`` with every occurrence of ``secret`` replaced by ``HIDDEN``: case-insensitive, any
    run of whitespace in ``secret`` matching any run in ``text``, whole words where ``secret``
    starts or ends with a word character (so a gold answer "a" does not eat every letter a)."""
    words = secret.split()
    if not words:
        return text
    body = r"\s+".join(re.escape(w) for w in words)
    start = r"(?<!\w)" if re.match(r"\w", words[0]) else ""
    end = r"(?!\w)" if re.search(r"\w$", words[-1]) else ""
    return re.sub(start + body + end, HIDDEN, text, flags=re.IGNORECASE)


def duration(s: float) -> str:
    """Seconds as a person reads a wait: ``45s``, ``12min``, ``1.5h``."""
    s = float(round(max(0.0, s)))  # whole seconds first, as the journal keeps a projection's time
    if s >= 3600:
        return f"{s / 3600:.1f}h"
    # halves up: 150 s read "2min" where 150.4 s read "3min" (status and run disagreed: QA)
    return f"{math.floor(s / 60 + 0.5)}min" if s >= 120 else f"{s:.0f}s"
