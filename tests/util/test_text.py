"""textutil: one elision marker everywhere, head+tail of huge files, front matter that never crashes."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from harnessopt.optimizer.tools import cap_output
from harnessopt.sandbox.docker.capture import HeadTail
from harnessopt.util.text import (
    FrontMatterError,
    elide,
    elision_marker,
    head_tail_of_file,
    load_yaml,
    parse_front_matter,
    read_front_matter,
    split_front_matter,
    tail,
)

# --------------------------------------------------------------------------- elision


def test_elide_keeps_head_and_tail_and_counts_the_middle() -> None:
    assert elide("short", 10) == "short"
    assert elide("a" * 50 + "b" * 50, 20) == "a" * 10 + "\n[... 80 chars elided ...]\n" + "b" * 10
    odd = elide("0123456789", 5)  # head 2, tail 3: exactly ``limit`` characters are kept
    assert odd == "01\n[... 5 chars elided ...]\n789"
    assert elide("abc", 0) == "\n[... 3 chars elided ...]\n"
    assert elide("x" * 9, 4, unit="bytes") == "xx\n[... 5 bytes elided ...]\nxx"


def test_tail_keeps_only_the_end() -> None:
    assert tail("abc", 3) == "abc"
    assert tail("abcdef", 2) == "[... 4 chars elided ...]\nef"
    assert elide("abcdef", 2, keep="tail") == tail("abcdef", 2)


def test_every_capture_uses_the_same_marker() -> None:
    stream = HeadTail(10)
    stream.add(b"0123456789" * 3)
    assert stream.text() == "01234" + elision_marker(20, "bytes") + "56789"
    assert cap_output("x" * 50, cap=10) == elide("x" * 50, 10)


def test_head_tail_of_small_and_large_files(tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.write_bytes(b"hello")
    assert head_tail_of_file(small, 10) == "hello"
    assert head_tail_of_file(str(small), 5) == "hello"
    big = tmp_path / "big"
    big.write_bytes(b"H" * 100 + b"m" * 1000 + b"T" * 100)
    assert head_tail_of_file(big, 200) == "H" * 100 + "\n[... 1000 bytes elided ...]\n" + "T" * 100
    with big.open("rb") as f:
        f.read(7)  # a file object is read from its start, wherever it was
        assert head_tail_of_file(f, 200) == head_tail_of_file(big, 200)
    assert head_tail_of_file(io.BytesIO(b"abcdefgh"), 4, unit="bytes") == "ab\n[... 4 bytes elided ...]\ngh"


def test_head_tail_of_a_huge_sparse_file_does_not_read_the_middle(tmp_path: Path) -> None:
    huge = tmp_path / "huge"
    with huge.open("wb") as f:
        f.write(b"START")
        f.truncate(8 << 30)  # 8 GiB, sparse: reading it all would take far longer than the bound
        f.seek((8 << 30) - 3)
        f.write(b"END")
    started = time.monotonic()
    text = head_tail_of_file(huge, 16)
    assert time.monotonic() - started < 2
    assert text.startswith("START") and text.endswith("END")
    assert f"[... {(8 << 30) - 16} bytes elided ...]" in text


def test_a_character_cut_at_the_edge_is_replaced_not_an_error() -> None:
    data = "é".encode() * 10  # 20 bytes; cap 6 keeps 3 + 3, cutting a two-byte character at each edge
    text = head_tail_of_file(io.BytesIO(data), 6)
    assert text == "é\ufffd\n[... 14 bytes elided ...]\n\ufffdé"


# --------------------------------------------------------------------------- front matter


def test_split_front_matter() -> None:
    assert split_front_matter("---\na: 1\n---\nbody\n") == ("a: 1", "body\n")
    assert split_front_matter("\ufeff---\r\na: 1\r\n---\r\nbody\r\n") == ("a: 1\r", "body\r\n")
    assert split_front_matter("no fence\n---\n") == (None, "no fence\n---\n")
    assert split_front_matter("") == (None, "")
    with pytest.raises(FrontMatterError) as info:
        split_front_matter("---\na: 1\n")
    assert info.value.problem == "unclosed"


def test_parse_front_matter() -> None:
    assert parse_front_matter("---\nsplit: train\nscore: 0.5\n---\n# body") == {
        "split": "train",
        "score": 0.5,
    }
    assert parse_front_matter("---\n---\n") == {}
    assert read_front_matter("---\na: 1\n---\nrest\n") == ({"a": 1}, "rest\n")
    for text, problem in [
        ("# no front matter", "missing"),
        ("---\na: 1\n", "unclosed"),
        ("---\na: [1\n---\n", "yaml"),
        ("---\n- a\n---\n", "not_mapping"),
        ("---\n? [a]\n: b\n---\n", "yaml"),  # an unhashable key
    ]:
        with pytest.raises(FrontMatterError) as info:
            parse_front_matter(text)
        assert info.value.problem == problem, text
        assert isinstance(info.value, ValueError) and "\n" not in str(info.value)


@pytest.mark.parametrize("document", ["key: " + "[" * 20_000, "key: " + "{a: " * 20_000, "- " * 20_000 + "x"])
def test_a_20000_deep_document_is_a_clean_error(document: str) -> None:
    text = "---\n" + document + "\n---\nbody\n"
    with pytest.raises(FrontMatterError) as info:
        parse_front_matter(text)
    assert info.value.problem == "yaml"
    assert "nested too deeply" in str(info.value)
    assert not isinstance(info.value, RecursionError)


def test_load_yaml_turns_any_parser_failure_into_one_error() -> None:
    assert load_yaml("a: 1") == {"a": 1}
    with pytest.raises(FrontMatterError, match="not valid YAML"):
        load_yaml("!!python/object:os.system ls")  # safe_load refuses to construct objects


def test_a_duration_reads_the_same_from_the_seconds_a_journal_keeps() -> None:
    """A run printed ~3min for 150.4 s; status, from the journal's 150, printed ~2min (QA)."""
    from harnessopt.util.text import duration

    assert duration(150.4) == duration(150) == "3min"
    assert [duration(x) for x in (0, 44.6, 119.4, 149.4, 3599, 5400)] == [
        "0s",
        "45s",
        "119s",
        "2min",
        "60min",
        "1.5h",
    ]
