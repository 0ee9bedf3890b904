"""The host's reading of the runner's frames (docker.DockerSandbox._take_frames), without Docker."""

from __future__ import annotations

from harnessopt.sandbox.docker.capture import HeadTail
from harnessopt.sandbox.docker.sandbox import DockerSandbox, _Stream


def frame(kind: bytes, payload: bytes = b"") -> bytes:
    return kind + len(payload).to_bytes(4, "big") + payload


def test_the_end_frame_stops_reading_and_what_follows_is_never_taken() -> None:
    st = _Stream(HeadTail(100), HeadTail(100))
    buf = bytearray(frame(b"O", b"hi") + frame(b"M", b'{"exit_code": 0}') + frame(b"T", b"tar") + frame(b"Z"))
    buf += frame(b"O", b"after the end")
    assert DockerSandbox._take_frames(st, buf, tar_cap=10) is False  # stop: the runner is done
    assert st.ended and st.broken is None and not st.tar_overflow
    assert st.stdout.text() == "hi" and st.meta == {"exit_code": 0} and bytes(st.tar) == b"tar"


def test_a_stream_without_an_end_frame_is_read_to_its_close() -> None:
    """An older runner sends no end frame: the host reads until the stream closes, as before."""
    st = _Stream(HeadTail(100), HeadTail(100))
    buf = bytearray(frame(b"M", b'{"exit_code": 1}') + frame(b"T", b"x"))
    assert DockerSandbox._take_frames(st, buf, tar_cap=10) is True and not st.ended
    assert DockerSandbox._take_frames(st, bytearray(frame(b"Q")), tar_cap=10) is False and st.broken
