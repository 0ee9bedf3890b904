"""Capped capture of a harness's stdout/stderr: keep the head and the tail, elide the middle."""

from __future__ import annotations

from harnessopt.util.text import elision_marker


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
            body += elision_marker(elided, "bytes").encode()
        return (body + tail).decode("utf-8", "replace")
