"""Bounded reads of HTTP answers from providers."""

from __future__ import annotations

from typing import Any


async def read_capped(content: Any, limit: int) -> bytes:
    """The body of an aiohttp response (``resp.content``, a StreamReader) up to ``limit + 1`` bytes.

    ``StreamReader.read(n)`` returns at most ``n`` bytes, and fewer whenever the body arrives in
    several chunks; this reads on until ``limit + 1`` bytes or the end. A result longer than ``limit``
    means the body is larger than allowed (the rest is never read).

    Args:
        content: the response's StreamReader.
        limit: the largest body accepted, in bytes.
    Returns:
        At most ``limit + 1`` bytes.
    """
    buf = bytearray()
    while len(buf) <= limit:
        chunk = await content.read(limit + 1 - len(buf))
        if not chunk:
            break
        buf += chunk
    return bytes(buf)
