"""Media are reserved at what they are billed, not at their bytes (issue 20, item 4).

A 1-bit PNG of 1092x1092 pixels is a few hundred bytes of base64 and ~1,590 tokens
(``width * height / 750``); a PDF is billed per page. The attack: many concurrent calls, each
with small high-resolution images, under a dollar budget the old byte-length reservation let
them pass several times over.
"""

from __future__ import annotations

import base64
import io
import math
import struct
import zlib
from typing import Any

from PIL import Image

from harnessopt.config import BudgetConfig
from harnessopt.gateway.media import MAX_IMAGE_TOKENS, PAGE_IMAGE_TOKENS, image_size, image_tokens, pdf_tokens
from harnessopt.gateway.server import Gateway
from harnessopt.protocols import Usage
from tests.support.billed_upstream import BilledUpstream, concurrent_calls

SIDE = 1092
BILLED = math.ceil(SIDE * SIDE / 750)  # 1,590: what the API bills such an image
IMAGES_PER_CALL = 20
MODEL = "claude-haiku-4-5"  # $1 / $5 per million tokens


def one_bit_png(width: int, height: int) -> bytes:
    """A black 1-bit greyscale PNG: a few hundred bytes whatever its size."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = (b"\x00" + bytes((width + 7) // 8)) * height
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(rows, 9))
        + chunk(b"IEND", b"")
    )


PNG = one_bit_png(SIDE, SIDE)
IMAGE = {
    "type": "image",
    "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(PNG).decode()},
}


def billed_by_pixels(request: dict[str, Any]) -> int:
    """As the API bills: BILLED tokens an image, plus the text."""
    blocks = [b for m in request["messages"] for b in m["content"]]
    return sum(BILLED if b["type"] == "image" else len(b.get("text", "")) for b in blocks)


def test_concurrent_calls_with_small_high_resolution_images_stay_within_max_cost() -> None:
    assert len(IMAGE["source"]["data"]) < 400  # type: ignore[index]  # bytes say ~100 tokens
    one_call = (IMAGES_PER_CALL * BILLED + 16 * 5) / 1_000_000  # its real cost in USD
    budget = BudgetConfig(max_cost=round(3.2 * one_call, 6))  # room for 3 such calls
    upstream = BilledUpstream(billed_by_pixels, delay_s=0.5)
    content = [{"type": "text", "text": "what?"}, *[IMAGE] * IMAGES_PER_CALL]
    with Gateway(upstream, budget) as gw:
        outcomes = concurrent_calls(
            gw, 10, model=MODEL, max_tokens=16, messages=[{"role": "user", "content": content}]
        )
        total, held = gw.total(), gw.held()
    assert len(outcomes) == 10 and total.calls == upstream.calls == outcomes.count("ok")
    assert total.cost_usd <= budget.max_cost, f"${total.cost_usd:.4f} spent of ${budget.max_cost}"  # type: ignore[operator]
    assert total.calls >= 2 and held == Usage()


def test_image_headers_give_their_size() -> None:
    assert image_size(PNG) == (SIDE, SIDE) and image_tokens(PNG) == BILLED
    for fmt, extra in (("JPEG", {}), ("GIF", {}), ("WEBP", {"lossless": True}), ("WEBP", {"quality": 50})):
        out = io.BytesIO()
        Image.new("RGB", (1500, 700), "white").save(out, fmt, **extra)
        assert image_size(out.getvalue()) == (1500, 700), fmt
    out = io.BytesIO()
    Image.new("RGBA", (300, 200)).save(out, "WEBP")  # alpha: the extended (VP8X) header
    assert image_size(out.getvalue()) == (300, 200)
    assert image_tokens(b"not an image") == MAX_IMAGE_TOKENS  # unreadable: the largest the API takes


def test_pdfs_are_counted_by_their_pages() -> None:
    out = io.BytesIO()
    pages = [Image.new("L", (600, 800), "white") for _ in range(7)]
    pages[0].save(out, "PDF", save_all=True, append_images=pages[1:])
    raw = out.getvalue()
    assert pdf_tokens(raw) >= 7 * PAGE_IMAGE_TOKENS + len(raw)
    assert pdf_tokens(b"%PDF-1.7 nothing readable") >= 100 * PAGE_IMAGE_TOKENS  # pages unknown: the most


def test_the_reservation_counts_pixels_not_base64_bytes() -> None:
    with Gateway(BilledUpstream(billed_by_pixels), BudgetConfig()) as gw:
        body = {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": [IMAGE, IMAGE]}]}
        nested = {"type": "tool_result", "tool_use_id": "t", "content": [IMAGE]}
        deep = {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": [nested]}]}
        raw = str(body).encode()
        assert gw.reservation("target", body, raw).input_tokens >= 2 * BILLED
        assert gw.reservation("target", deep, str(deep).encode()).input_tokens >= BILLED
