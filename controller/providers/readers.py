"""Read a subscription's usage windows from its provider over HTTP, with retries and a per-process cache.

Endpoints mirrored:
- Anthropic: ``GET {base}/api/oauth/usage`` with ``Authorization: Bearer <claudeAiOauth.accessToken>``,
  ``anthropic-beta: oauth-2025-04-20`` and a ``claude-code/<ver>`` User-Agent (other agents land in a
  429 bucket, field-pitfalls §8). Body parsed by `parse_anthropic_usage`.
- OpenAI (ChatGPT plans): ``GET {base}/backend-api/wham/usage`` with ``Authorization: Bearer
  <tokens.access_token>`` and ``ChatGPT-Account-Id: <tokens.account_id>``. Body parsed by
  `parse_openai_usage`.

Errors are sanitized: messages carry provider, host, path and status only — never headers, tokens or
query strings — and exceptions are raised ``from None`` so no aiohttp request info is chained.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import aiohttp
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential, wait_random

from controller import __version__
from controller.domain.types import Usage
from controller.providers.bounded import read_capped
from controller.providers.retry_after import parse_retry_after
from controller.redact import url_for_message
from controller.providers.credentials import Login
from controller.providers.parse import UsageParseError, parse_anthropic_usage, parse_openai_usage

__all__ = [
    "ANTHROPIC_USAGE_PATH",
    "DEFAULT_ANTHROPIC_BASE_URL",
    "DEFAULT_ANTHROPIC_USER_AGENT",
    "DEFAULT_OPENAI_BASE_URL",
    "OPENAI_USAGE_PATH",
    "UsageCache",
    "UsageReadError",
    "UsageReader",
    "UsageThrottled",
    "UsageUnauthorized",
]

log = logging.getLogger(__name__)

DEFAULT_ANTHROPIC_BASE_URL = "https://api.anthropic.com"
DEFAULT_OPENAI_BASE_URL = "https://chatgpt.com"
ANTHROPIC_USAGE_PATH = "/api/oauth/usage"
OPENAI_USAGE_PATH = "/backend-api/wham/usage"
MAX_USAGE_ANSWER = 262144
"""Longest usage answer read (bytes; the real ones are about 1 KiB): a larger one is a read error and is
not parsed, so a provider (or whatever answers at its address) cannot grow the controller."""
ANTHROPIC_BETA = "oauth-2025-04-20"
# The OAuth usage endpoint wants a Claude Code User-Agent (Maciek-roboblog/Claude-Code-Usage-Monitor#202).
DEFAULT_ANTHROPIC_USER_AGENT = "claude-code/2.1.328"
DEFAULT_OPENAI_USER_AGENT = f"agentbox-controller/{__version__}"


class UsageReadError(Exception):
    """A usage read failed. Message: provider, host+path, status or error class; never tokens or headers.

    Attributes:
        provider: "anthropic" | "openai".
        status: HTTP status, or None for connection errors / timeouts / bad bodies.
    """

    def __init__(self, message: str, *, provider: str = "", status: int | None = None) -> None:
        self.provider = provider
        self.status = status
        super().__init__(message)


class UsageThrottled(UsageReadError):
    """The provider said "not now" (429, or a Retry-After): try later. It never means "window exhausted".

    Attributes:
        retry_after_s: seconds from ``Retry-After`` (delta or HTTP date), or None when not given.
    """

    def __init__(self, message: str, *, retry_after_s: float | None, provider: str = "", status: int | None = None):
        self.retry_after_s = retry_after_s
        super().__init__(message, provider=provider, status=status)


class UsageUnauthorized(UsageReadError):
    """401/403: the login is expired, revoked or not allowed to read usage."""


class _Transient(Exception):
    """Internal: a retryable failure (5xx, connection error, timeout). Carries a sanitized description."""

    def __init__(self, what: str, status: int | None = None) -> None:
        self.what = what
        self.status = status
        super().__init__(what)


def _retry_after(value: str | None, now: datetime) -> float | None:
    """Retry-After as seconds (the shared parser, `controller.providers.retry_after`)."""
    return parse_retry_after(value, now)


@dataclass(frozen=True)
class _Endpoint:
    base_url: str
    path: str

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + self.path

    @property
    def where(self) -> str:
        """host[:port]/path: safe for messages (no scheme credentials, no query; :func:`controller.redact.url_for_message`)."""
        return url_for_message(self.url)


class UsageReader:
    """Reads one subscription's usage from its provider. One instance (and one aiohttp session) per process.

    Args:
        session: a shared ``aiohttp.ClientSession``; when None one is created on first use and closed by
            `close()` (an injected session is never closed here).
        anthropic_base_url / openai_base_url: provider bases (defaults https://api.anthropic.com,
            https://chatgpt.com); tests point both at a `ProviderEmulator`.
        connect_timeout_s / total_timeout_s: per attempt, seconds.
        attempts: total attempts on 5xx / connection errors / timeouts (1 = no retry).
        backoff_initial_s / backoff_max_s / backoff_jitter_s: jittered exponential backoff between attempts.
        anthropic_user_agent / openai_user_agent: User-Agent per provider.
    """

    def __init__(
        self,
        session: aiohttp.ClientSession | None = None,
        *,
        anthropic_base_url: str = DEFAULT_ANTHROPIC_BASE_URL,
        openai_base_url: str = DEFAULT_OPENAI_BASE_URL,
        connect_timeout_s: float = 5.0,
        total_timeout_s: float = 15.0,
        attempts: int = 4,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 8.0,
        backoff_jitter_s: float = 0.5,
        anthropic_user_agent: str = DEFAULT_ANTHROPIC_USER_AGENT,
        openai_user_agent: str = DEFAULT_OPENAI_USER_AGENT,
    ) -> None:
        self._session = session
        self._own_session = session is None
        self._endpoints = {
            "anthropic": _Endpoint(anthropic_base_url, ANTHROPIC_USAGE_PATH),
            "openai": _Endpoint(openai_base_url, OPENAI_USAGE_PATH),
        }
        self._timeout = aiohttp.ClientTimeout(total=total_timeout_s, connect=connect_timeout_s)
        self._attempts = max(1, int(attempts))
        # Exponential from backoff_initial_s, capped, plus uniform jitter (spreads many subscriptions' retries).
        self._wait = wait_exponential(multiplier=backoff_initial_s, max=backoff_max_s) + wait_random(
            0, backoff_jitter_s
        )
        self._user_agents = {"anthropic": anthropic_user_agent, "openai": openai_user_agent}

    async def __aenter__(self) -> UsageReader:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the session if this reader created it."""
        if self._own_session and self._session is not None and not self._session.closed:
            await self._session.close()
        self._session = None if self._own_session else self._session

    def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            if not self._own_session:
                raise RuntimeError("the injected aiohttp session is closed")
            self._session = aiohttp.ClientSession()
        return self._session

    def _headers(self, provider: str, login: Login) -> dict[str, str]:
        h = {
            "Authorization": f"Bearer {login.access_token}",
            "Accept": "application/json",
            "User-Agent": self._user_agents[provider],
        }
        if provider == "anthropic":
            h["anthropic-beta"] = ANTHROPIC_BETA
        else:
            if login.account_id:
                h["ChatGPT-Account-Id"] = login.account_id
        return h

    async def read(
        self,
        provider: str,
        login: Login,
        now: Callable[[], datetime],
        *,
        on_request: Callable[[], None] | None = None,
    ) -> Usage:
        """Read the usage windows once (retrying transient failures).

        Args:
            provider: "anthropic" or "openai"; must match ``login.provider``.
            login: from `parse_login`.
            now: clock returning a tz-aware UTC instant; stamps ``Usage.read_at`` and is the base of
                relative resets (``reset_after_seconds``) and of a dated ``Retry-After``.
            on_request: called before every HTTP attempt (for counting calls).

        Returns:
            Usage with windows "five_hour" / "weekly" / "monthly" (percent 0-100, ``resets_at`` UTC).

        Raises:
            UsageThrottled: 429, or any response with ``Retry-After`` (means "not now", never "exhausted").
            UsageUnauthorized: 401 / 403.
            UsageReadError: other statuses, a body that is not the expected JSON (message names the field),
                or 5xx / connection errors / timeouts still failing after the configured attempts.
            ValueError: unknown provider or a login of another provider.
        """
        if provider not in self._endpoints:
            raise ValueError(f"unknown provider {provider!r}")
        if login.provider != provider:
            raise ValueError(f"login is for {login.provider}, not {provider}")
        ep = self._endpoints[provider]
        headers = self._headers(provider, login)
        try:
            async for attempt in AsyncRetrying(
                retry=retry_if_exception_type(_Transient),
                stop=stop_after_attempt(self._attempts),
                wait=self._wait,
                reraise=True,
            ):
                with attempt:
                    if on_request is not None:
                        on_request()
                    return await self._once(provider, ep, headers, now)
        except _Transient as e:
            raise UsageReadError(
                f"{provider} usage read failed after {self._attempts} attempt(s): {e.what} from {ep.where}",
                provider=provider,
                status=e.status,
            ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _once(
        self, provider: str, ep: _Endpoint, headers: dict[str, str], now: Callable[[], datetime]
    ) -> Usage:
        session = self._get_session()
        try:
            async with session.get(ep.url, headers=headers, timeout=self._timeout, allow_redirects=False) as resp:
                status = resp.status
                retry_after = resp.headers.get("Retry-After")
                if status == 200:
                    raw = await read_capped(resp.content, MAX_USAGE_ANSWER)
                    if len(raw) > MAX_USAGE_ANSWER:
                        raise UsageReadError(
                            f"{provider} usage response from {ep.where} is larger than {MAX_USAGE_ANSWER} bytes",
                            provider=provider, status=200,
                        )
                    try:
                        body = json.loads(raw)
                    except (ValueError, RecursionError):
                        raise UsageReadError(
                            f"{provider} usage response from {ep.where} is not JSON", provider=provider, status=200
                        ) from None
                else:
                    await resp.read()
        except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
            raise _Transient("timeout") from None
        except aiohttp.ClientConnectionError as e:
            raise _Transient(f"connection error ({type(e).__name__})") from None
        except aiohttp.ClientPayloadError as e:
            raise _Transient(f"broken response ({type(e).__name__})") from None

        read_at = now()
        if status == 429 or (retry_after is not None and status >= 400):
            secs = _retry_after(retry_after, read_at)
            log.info("%s usage read throttled: HTTP %s, retry after %s s", provider, status, secs)
            raise UsageThrottled(
                f"{provider} usage read throttled: HTTP {status} from {ep.where}"
                + (f", retry after {secs:g} s" if secs is not None else ""),
                retry_after_s=secs,
                provider=provider,
                status=status,
            )
        if status in (401, 403):
            raise UsageUnauthorized(
                f"{provider} usage read unauthorized: HTTP {status} from {ep.where} (login expired or revoked?)",
                provider=provider,
                status=status,
            )
        if status >= 500:
            raise _Transient(f"HTTP {status}", status)
        if status != 200:
            raise UsageReadError(
                f"{provider} usage read failed: HTTP {status} from {ep.where}", provider=provider, status=status
            )
        if not isinstance(body, dict):
            raise UsageReadError(
                f"{provider} usage response from {ep.where} is not a JSON object", provider=provider, status=200
            )
        try:
            if provider == "anthropic":
                return parse_anthropic_usage(body, read_at)
            return parse_openai_usage(body, read_at)
        except UsageParseError as e:
            raise UsageReadError(
                f"{provider} usage response from {ep.where} is malformed: {e}", provider=provider, status=200
            ) from None


@dataclass
class _Entry:
    usage: Usage
    stored_at: datetime


class UsageCache:
    """Per-process usage cache keyed by subscription ``(namespace, name)``.

    Concurrent `get` calls for one key share ONE in-flight read; a cached Usage younger than ``max_age_s``
    (by the injected clock) is returned without a read. Failures are not cached: every waiter of the
    failed read gets the same exception. One exception: a provider's ``Retry-After`` is honoured in
    full for every caller of the key (the subscription's reader and every box's resume check): until
    it has passed, `get` raises `UsageThrottled` (with the seconds left) without a request.

    Attributes:
        calls: HTTP requests issued per key (retries included), for tests and benchmarks.
    """

    def __init__(self, reader: UsageReader) -> None:
        self._reader = reader
        self._entries: dict[Hashable, _Entry] = {}
        self._inflight: dict[Hashable, asyncio.Future[Usage]] = {}
        self.calls: dict[Hashable, int] = {}
        self._not_before: dict[Hashable, datetime] = {}

    async def get(
        self,
        key: Hashable,
        provider: str,
        login: Login,
        *,
        max_age_s: float,
        now: Callable[[], datetime],
    ) -> Usage:
        """The usage of ``key``: cached when younger than ``max_age_s`` seconds, else read (coalesced).

        Raises:
            The `UsageReader.read` errors (UsageThrottled, UsageUnauthorized, UsageReadError).
        """
        entry = self._entries.get(key)
        if entry is not None and (now() - entry.stored_at).total_seconds() < max_age_s:
            return entry.usage
        hold = self._not_before.get(key)
        if hold is not None:
            left = (hold - now()).total_seconds()
            if left > 0:
                raise UsageThrottled(f"{provider} usage API asked to wait; {left:.0f} s left (Retry-After)",
                                     retry_after_s=left, provider=provider, status=429)
            self._not_before.pop(key, None)
        fut = self._inflight.get(key)
        if fut is None:
            fut = asyncio.ensure_future(self._fetch(key, provider, login, now))
            self._inflight[key] = fut
            # Mark the exception retrieved even if every caller was cancelled.
            fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        # shield: a cancelled caller must not cancel the read the other callers wait on.
        return await asyncio.shield(fut)

    async def _fetch(self, key: Hashable, provider: str, login: Login, now: Callable[[], datetime]) -> Usage:
        def count() -> None:
            self.calls[key] = self.calls.get(key, 0) + 1

        try:
            usage = await self._reader.read(provider, login, now, on_request=count)
            self._entries[key] = _Entry(usage, now())
            return usage
        except UsageThrottled as exc:
            if exc.retry_after_s:
                self._not_before[key] = now() + timedelta(seconds=exc.retry_after_s)
            raise
        finally:
            self._inflight.pop(key, None)

    def invalidate(self, key: Hashable) -> None:
        """Forget the cached Usage of ``key`` (an in-flight read still completes and is stored)."""
        self._entries.pop(key, None)

    def peek(self, key: Hashable) -> Usage | None:
        """The last cached Usage of ``key`` whatever its age, or None; never reads."""
        entry = self._entries.get(key)
        return entry.usage if entry else None
