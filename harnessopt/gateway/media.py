"""What images and PDFs in a request can be billed, read from their own bytes.

The API bills an image by its pixels, about ``width * height / 750`` tokens (a 304-byte PNG of
1092x1092 pixels is ~1,590 tokens), and a PDF page as its text plus an image of the page, so a
request's byte length does not bound its input tokens. ``media_bound`` walks a request body and
returns, for the base64 media it holds, how many bytes of the body they take and at most how
many tokens they are billed for:

* images: the dimensions in the PNG, JPEG, GIF or WebP header, each side at most MAX_SIDE
  pixels (the API refuses larger); an image whose header cannot be read counts as MAX_SIDE
  square;
* PDFs: per page PAGE_IMAGE_TOKENS (the page's image, at most the largest image the API bills
  without downscaling) plus the PDF's bytes and the bytes of its streams once inflated (a
  token is at least one byte of text); a PDF whose pages cannot be counted counts as MAX_PAGES;
* media the API fetches itself (``url``, ``file``: only with ``model.allow_server_tools``):
  the largest image, or MAX_PAGES pages of MAX_PAGE_TOKENS.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
import zlib
from collections.abc import Iterator
from typing import Any

PIXELS_PER_TOKEN = 750
MAX_SIDE = 8000  # pixels: the API refuses an image with a longer side
MAX_IMAGE_TOKENS = math.ceil(MAX_SIDE * MAX_SIDE / PIXELS_PER_TOKEN)
PAGE_IMAGE_TOKENS = 1600  # the image of one PDF page: the API scales pages to ~1.15 megapixels
MAX_PAGES = 100  # pages of a PDF the API accepts in one request
MAX_PAGE_TOKENS = PAGE_IMAGE_TOKENS + 10_000  # a page fetched by URL: its image and a dense page of text
INFLATE_CAP = 16 * 1024 * 1024  # bytes of a PDF's streams inflated to bound its text; past it, the cap
# Where a body holds data the API only passes to the model (tool inputs and schemas, the
# caller's metadata): a "source" there is not a media source.
OPAQUE_KEYS = frozenset({"input", "input_schema", "input_examples", "schema", "metadata"})


def media_bound(body: Any) -> tuple[int, int]:
    """(bytes of base64 media data in ``body``, at most how many tokens that media is billed)."""
    data_bytes = tokens = 0
    for block in media_blocks(body):
        source = block["source"]
        kind, data = source.get("type"), source.get("data")
        is_pdf = block.get("type") == "document"
        if kind == "base64" and isinstance(data, str):
            raw = _b64(data)
            data_bytes += len(data)
            tokens += pdf_tokens(raw) if is_pdf else image_tokens(raw)
        elif kind not in ("text", "content"):  # fetched by the API: its size is unknown here
            tokens += MAX_PAGES * MAX_PAGE_TOKENS if is_pdf else MAX_IMAGE_TOKENS
    return data_bytes, tokens


def media_blocks(node: Any) -> Iterator[dict[str, Any]]:
    """Every image or document block with a ``source`` in ``node``, at any depth."""
    if isinstance(node, list):
        for item in node:
            yield from media_blocks(item)
        return
    if not isinstance(node, dict):
        return
    if node.get("type") in ("image", "document") and isinstance(node.get("source"), dict):
        yield node
    for key, value in node.items():
        if key not in OPAQUE_KEYS and isinstance(value, (dict, list)):
            yield from media_blocks(value)


def image_tokens(raw: bytes) -> int:
    """At most the tokens an image is billed for: its pixels / 750 (MAX_SIDE square if unreadable)."""
    size = image_size(raw)
    width, height = size if size else (MAX_SIDE, MAX_SIDE)
    return math.ceil(min(width, MAX_SIDE) * min(height, MAX_SIDE) / PIXELS_PER_TOKEN)


def image_size(raw: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG, GIF, WebP or JPEG header, or None when it is none of them."""
    if raw[:8] == b"\x89PNG\r\n\x1a\n" and len(raw) >= 24:
        return struct.unpack(">II", raw[16:24])
    if raw[:6] in (b"GIF87a", b"GIF89a") and len(raw) >= 10:
        return struct.unpack("<HH", raw[6:10])
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        return _webp_size(raw)
    if raw[:2] == b"\xff\xd8":
        return _jpeg_size(raw)
    return None


def _webp_size(raw: bytes) -> tuple[int, int] | None:
    chunk = raw[12:16]
    if chunk == b"VP8X" and len(raw) >= 30:
        return 1 + int.from_bytes(raw[24:27], "little"), 1 + int.from_bytes(raw[27:30], "little")
    if chunk == b"VP8L" and len(raw) >= 25:
        bits = int.from_bytes(raw[21:25], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if chunk == b"VP8 " and len(raw) >= 30:
        width, height = struct.unpack("<HH", raw[26:30])
        return width & 0x3FFF, height & 0x3FFF
    return None


_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def _jpeg_size(raw: bytes) -> tuple[int, int] | None:
    """The frame size of the first start-of-frame segment."""
    i = 2
    while i + 4 <= len(raw):
        if raw[i] != 0xFF:
            return None
        marker = raw[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # segments without a length
            i += 2
            continue
        length = int.from_bytes(raw[i + 2 : i + 4], "big")
        if marker in _SOF and i + 9 <= len(raw):
            height, width = struct.unpack(">HH", raw[i + 5 : i + 9])
            return width, height
        i += 2 + length
    return None


_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z])")
_STREAM = re.compile(rb"stream\r?\n")


def pdf_tokens(raw: bytes) -> int:
    """At most the tokens a PDF is billed for: per page its image, plus every byte of its text."""
    inflated = _inflated(raw)
    pages = sum(len(_PAGE.findall(part)) for part in (raw, *inflated)) or MAX_PAGES
    text = len(raw) + sum(len(part) for part in inflated)
    return min(pages, MAX_PAGES) * PAGE_IMAGE_TOKENS + text


def _inflated(raw: bytes) -> list[bytes]:
    """The PDF's Flate streams inflated (where they are not, their bytes are counted in ``raw``),
    INFLATE_CAP bytes in all at most: past it the last part is padded to the cap."""
    parts: list[bytes] = []
    left = INFLATE_CAP
    view = memoryview(raw)
    for match in _STREAM.finditer(raw):
        if left <= 0:
            break
        inflater = zlib.decompressobj()
        try:
            part = inflater.decompress(view[match.end() :], left)
        except zlib.error:
            continue
        if inflater.unconsumed_tail:  # more than the cap: count it as the cap
            part += bytes(left - len(part))
        parts.append(part)
        left -= len(part)
    return parts


def _b64(data: str) -> bytes:
    try:
        return base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError):
        return b""
