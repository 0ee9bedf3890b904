"""Capped capture of a harness's stdout/stderr: keep the head and the tail, elide the middle."""

from __future__ import annotations

from pathlib import Path


class HeadTail:
    """Keeps the first and last ``cap // 2`` bytes of a stream of chunks, and counts the rest."""

    def __init__(self, cap: int):
        self.half = max(cap // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 2 * self.half:  # trim in batches, not on every chunk
                del self.tail[: len(self.tail) - self.half]

    def text(self) -> str:
        tail = bytes(self.tail[-self.half :])
        elided = self.total - len(self.head) - len(tail)
        body = bytes(self.head)
        if elided > 0:
            body += f"\n[... {elided} bytes elided by harnessopt ...]\n".encode()
        return (body + tail).decode("utf-8", "replace")


def head_tail_of_file(path: Path, cap: int) -> str:
    """The head and tail of a (possibly huge) file, read without loading the middle."""
    size = path.stat().st_size
    half = max(cap // 2, 1)
    with path.open("rb") as f:
        if size <= 2 * half:
            return f.read().decode("utf-8", "replace")
        head = f.read(half)
        f.seek(size - half)
        tail = f.read(half)
    marker = f"\n[... {size - 2 * half} bytes elided by harnessopt ...]\n".encode()
    return (head + marker + tail).decode("utf-8", "replace")
