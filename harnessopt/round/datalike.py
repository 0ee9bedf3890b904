"""A cheap static signal: does a candidate's diff add data rather than instructions or code?

The lines a candidate adds (``leakage.added_lines``) and the files it adds under ``skill/`` are
looked at for what an answer table looks like, whatever its encoding:

* many short literals: ``SHORT_LITERALS`` or more quoted strings of at most 40 characters;
* encoded strings: ``ENCODED_PIECES`` or more pieces of quoted strings (between separators) that
  look like base64 (its padding, or both cases and digits), however compactly they are packed;
* blobs: a run of ``BLOB_CHARS`` or more base64 or hex characters, or a run of 20+ of the
  characters encodings use whose character entropy is at least ``ENTROPY_BITS`` bits (a hash, an
  encoded string; a line of code such as ``os.environ.get("HO_FLAG_SHOUT")`` is not one);
* data files: a new file under ``skill/`` with a data extension, or one that is not UTF-8 text.

A finding flags the round for review (``checks.datalike``: recorded in the manifest, said in the
round's output, shown by ``log`` and the report); it never rejects by itself: a skill may well
ship a lookup table of unit conversions. The behavioural check (``round.memorised``) decides.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harnessopt.round.leakage import added_lines

SHORT_LITERALS = 25  # quoted short strings in the added lines
ENCODED_PIECES = 8  # encoded-looking pieces of quoted strings (a compact table: 'UGFyaXM=','Q2Fu...')
BLOB_CHARS = 40  # base64/hex characters in a row
ENTROPY_BITS = 4.2  # bits per character of a 20+ character token (English words: ~3-3.5)
DATA_SUFFIXES = (
    ".json", ".jsonl", ".csv", ".tsv", ".pkl", ".pickle", ".npy", ".npz", ".db", ".sqlite",
    ".parquet", ".bin", ".dat", ".gz", ".zip", ".b64", ".yaml", ".yml",
)  # fmt: skip
_QUOTED = r"""(["'])((?:(?!\1)[^\\\n]|\\.){%s})\1"""  # a quoted string of so many characters
_LITERAL = re.compile(_QUOTED % "1,40")
_LONG_LITERAL = re.compile(_QUOTED % "41,")  # longer than _LITERAL takes: its pieces count too
_BLOB = re.compile(rf"[A-Za-z0-9+/_-]{{{BLOB_CHARS},}}={{0,2}}|[0-9a-fA-F]{{{BLOB_CHARS // 2 * 2},}}")
# a run of the characters encodings use: code around one (dots, brackets, quotes) is not part of it
_TOKEN = re.compile(r"[A-Za-z0-9+/=_-]{20,}")
_PIECE = re.compile(r"[A-Za-z0-9+/]{6,}={0,2}")  # a piece of a quoted string between separators


def entropy(text: str) -> float:
    """Shannon entropy of the characters of ``text``, in bits per character."""
    counts = Counter(text)
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in counts.values()) if n else 0.0


def _base64_mix(text: str) -> bool:
    """Both cases and digits, as base64 mixes them (a word, a name or a path has not all three)."""
    return (
        any(c.isupper() for c in text) and any(c.islower() for c in text) and any(c.isdigit() for c in text)
    )


def _encoded(blob: str) -> bool:
    """Hex, or base64's mix of both cases and digits (a long identifier or path is neither)."""
    return bool(re.fullmatch(r"[0-9a-fA-F]+", blob)) or _base64_mix(blob)


def _encoded_pieces(literal: str) -> int:
    """Pieces of a quoted string (between separators) that look encoded: base64's padding, or its
    mix of both cases and digits ('UGFyaXM=', 'Q2FuYmVycmE='); a word or a name is neither."""
    return sum(1 for piece in _PIECE.findall(literal) if piece.endswith("=") or _base64_mix(piece))


def scan(incumbent: Path, candidate: Path, parts: Sequence[str]) -> dict[str, Any]:
    """The manifest's ``checks.datalike`` record: the signals found and whether the round is flagged."""
    signals: list[str] = []
    literals, encoded, blobs = 0, 0, []
    for path, lines in added_lines(incumbent, candidate, parts).items():
        for no, text in lines:
            quoted = [m.group(2) for m in _LITERAL.finditer(text)]
            literals += len(quoted)
            longer = [m.group(2) for m in _LONG_LITERAL.finditer(text)]
            encoded += sum(_encoded_pieces(q) for q in [*quoted, *longer])
            found = [m.group(0) for m in _BLOB.finditer(text) if _encoded(m.group(0))]
            found += [t for t in _TOKEN.findall(text) if entropy(t) >= ENTROPY_BITS and t not in found]
            blobs += [f"{path}:{no}: {b[:32]}..." for b in found]
    if literals >= SHORT_LITERALS:
        signals.append(f"{literals} short quoted literals added")
    if encoded >= ENCODED_PIECES:
        signals.append(f"{encoded} encoded-looking strings added")
    if blobs:
        signals.append(f"{len(blobs)} encoded or high-entropy blob(s) added, e.g. {blobs[0]}")
    new_files = _new_data_files(incumbent, candidate)
    if new_files:
        signals.append(f"new data file(s) under skill/: {', '.join(new_files[:5])}")
    rec: dict[str, Any] = {"flagged": bool(signals), "signals": signals}
    if signals:
        rec["note"] = "review: data-like additions (" + "; ".join(signals) + ")"
    return rec


def _new_data_files(incumbent: Path, candidate: Path) -> list[str]:
    base = candidate / "skill"
    out = []
    for path in sorted(base.rglob("*")) if base.is_dir() else []:
        rel = path.relative_to(candidate)
        if (
            not path.is_file()
            or path.is_symlink()
            or (incumbent / rel).exists()
            or "__pycache__" in rel.parts
        ):
            continue
        if path.suffix.lower() in DATA_SUFFIXES or not _is_text(path):
            out.append(str(rel))
    return out


def _is_text(path: Path) -> bool:
    data = path.read_bytes()[:65536]
    if b"\0" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:  # a character cut at the 64 KiB mark is still text
        return e.start >= len(data) - 3
    return True


def flag(
    k: int, incumbent: Path, candidate: Path, parts: Sequence[str], mode: str, say: Any
) -> dict[str, Any]:
    """The round's static step: ``{"datalike": record}`` for ``Trail.checks`` (nothing when
    ``checks.datalike: off``), said when flagged."""
    if mode == "off":
        return {}
    rec = scan(incumbent, candidate, parts)
    if rec["flagged"]:
        say(f"round {k}: {rec['note']}")
    return {"datalike": rec}
