"""The host's reading of the runner's frames (docker.DockerSandbox._take_frames, _frames), without Docker."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from harnessopt.sandbox.docker.capture import HeadTail
from harnessopt.sandbox.docker.sandbox import DockerSandbox, _frames, _Stream
from tests.support.interrupts import flag_handler_installed, swallow_an_interrupt_main


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


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the swallow, on purpose
def test_a_cancel_a_finalizer_swallowed_still_ends_a_silent_read() -> None:
    """A Ray cancel's KeyboardInterrupt that lands in a finalizer is dropped; with the flag's
    handler (as a Ray worker's job installs it) the next read slice raises it again, rather than the
    read going on until the container ends (here its peer closes after 3 s)."""
    ours, theirs = socket.socketpair()
    closer = threading.Timer(3, theirs.close)
    try:
        with flag_handler_installed():
            swallow_an_interrupt_main()
            closer.start()
            t0 = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                list(_frames(ours))
            assert time.monotonic() - t0 < 2
    finally:
        closer.cancel()
        ours.close()
        theirs.close()
