"""`agentbox-controller usage`: read one login's usage windows once and print them as JSON.

    agentbox-controller usage --provider {anthropic,openai} --credentials FILE [--base-url URL]

stdout: ``{"windows": {"five_hour": {"utilization": 37.0, "resets_at": "2026-03-10T04:59:59Z"}, ...},
"read_at": "...Z"}`` (percent 0-100, UTC). Errors: one line on stderr, never a token; exit 2 for a bad
credentials file, 1 for a failed read (unauthorized, throttled, upstream unavailable, malformed response).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import datetime, timezone
from typing import Any

from controller.providers.credentials import InvalidLogin, parse_login
from controller.providers.parse import usage_to_json
from controller.providers.readers import (
    DEFAULT_ANTHROPIC_BASE_URL,
    DEFAULT_OPENAI_BASE_URL,
    UsageReader,
    UsageReadError,
    UsageThrottled,
    UsageUnauthorized,
)

__all__ = ["add_usage_parser", "run_usage", "run_usage_async"]

EXIT_OK = 0
EXIT_READ_FAILED = 1
EXIT_BAD_INPUT = 2


def add_usage_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``usage`` sub-command to an ``argparse`` subparsers object; sets ``func=run_usage``."""
    p = subparsers.add_parser(
        "usage",
        help="read a login's usage windows once and print them as JSON",
        description="Read the usage windows of one Claude Code or Codex login and print them as JSON.",
    )
    p.add_argument("--provider", required=True, choices=["anthropic", "openai"],
                   help="anthropic: Claude Code .credentials.json; openai: Codex auth.json (ChatGPT login)")
    p.add_argument("--credentials", required=True, metavar="FILE", help="path of the login file")
    p.add_argument("--base-url", default=None, metavar="URL",
                   help=f"provider base URL (default {DEFAULT_ANTHROPIC_BASE_URL} / {DEFAULT_OPENAI_BASE_URL})")
    p.add_argument("--timeout", type=float, default=15.0, metavar="SECONDS", help="per-attempt timeout (15)")
    p.add_argument("--attempts", type=int, default=3, help="attempts on 5xx / connection errors (3)")
    p.add_argument("--retry-backoff", type=float, default=0.5, metavar="SECONDS",
                   help="initial jittered backoff between attempts (0.5)")
    p.set_defaults(func=run_usage)
    return p


def _err(msg: str) -> None:
    print(f"agentbox-controller usage: {msg}", file=sys.stderr)


def _now() -> datetime:
    return datetime.now(timezone.utc)


async def run_usage_async(ns: argparse.Namespace) -> int:
    """`run_usage` for callers already inside an event loop. Returns the exit code."""
    try:
        with open(ns.credentials, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        _err(f"cannot read credentials file {ns.credentials}: {e.strerror or type(e).__name__}")
        return EXIT_BAD_INPUT
    except UnicodeDecodeError:
        _err(f"credentials file {ns.credentials} is not UTF-8 text")
        return EXIT_BAD_INPUT
    try:
        login = parse_login(ns.provider, text)
    except InvalidLogin as e:
        _err(f"invalid login file {ns.credentials}: {e.reason}")
        return EXIT_BAD_INPUT

    backoff = getattr(ns, "retry_backoff", 0.5)
    kwargs: dict[str, Any] = {
        "total_timeout_s": getattr(ns, "timeout", 15.0),
        "connect_timeout_s": min(5.0, getattr(ns, "timeout", 15.0)),
        "attempts": getattr(ns, "attempts", 3),
        "backoff_initial_s": backoff,
        "backoff_max_s": max(backoff, 4.0),
        "backoff_jitter_s": backoff,
    }
    if ns.base_url:
        from urllib.parse import urlsplit

        parts = urlsplit(ns.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
            _err("--base-url: expected http(s)://host[:port][/path] without credentials")
            return EXIT_BAD_INPUT
        kwargs["anthropic_base_url" if ns.provider == "anthropic" else "openai_base_url"] = ns.base_url
    try:
        async with UsageReader(**kwargs) as reader:
            usage = await reader.read(ns.provider, login, _now)
    except UsageThrottled as e:
        _err(str(e))
        return EXIT_READ_FAILED
    except UsageUnauthorized as e:
        _err(str(e))
        return EXIT_READ_FAILED
    except UsageReadError as e:
        _err(str(e))
        return EXIT_READ_FAILED
    print(json.dumps(usage_to_json(usage), indent=2))
    return EXIT_OK


def run_usage(ns: argparse.Namespace) -> int:
    """Run ``usage`` for parsed args ``ns`` (provider, credentials, base_url[, timeout, attempts]).

    Returns:
        0 printed the JSON; 1 the read failed (unauthorized / throttled / unavailable / malformed);
        2 the credentials file is missing, unreadable or not a login of that provider.
    """
    return asyncio.run(run_usage_async(ns))
