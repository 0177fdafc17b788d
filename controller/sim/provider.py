"""Provider emulator: an aiohttp server on 127.0.0.1 that answers like Anthropic's and ChatGPT's usage APIs.

Serves (shapes as in tests/fixtures/corpus/usage-payloads.jsonl):
- ``GET /api/oauth/usage`` (Anthropic OAuth usage, as Claude Code 2.1.x reads it);
- ``GET /backend-api/wham/usage`` (ChatGPT usage, as Codex CLI 0.169 reads it).

The Bearer token decides which account is asked (``add_login(token, account)``); unknown tokens get 401.
Per account, either a raw payload (``set_usage``) or windows (``set_windows``, rendered into both shapes).
``fail_next`` scripts failures (5xx / 429 / 401 with headers). Every request is recorded in ``requests``
with a token fingerprint (sha256[:8]) only, never the token.

Extending: routes live on ``self.app`` (created in ``__init__``); a later issue adds the agents'
``/v1/messages`` and ``/responses`` endpoints there before `start()`. Middlewares record requests and
apply scripted failures to every route; use `account_for(request)` to resolve the caller.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from aiohttp import web

__all__ = ["Failure", "ProviderEmulator", "RecordedRequest"]

HEADERS_OF_INTEREST = (
    "user-agent",
    "anthropic-beta",
    "anthropic-version",
    "chatgpt-account-id",
    "accept",
    "x-app",
    "originator",
    "content-type",
)

WindowSpec = tuple[float, "datetime | None"]


def _fp(token: str | None) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:8] if token else ""


@dataclass(frozen=True)
class RecordedRequest:
    """One request seen by the emulator.

    Attributes:
        method, path: as received (path without the query string).
        token_fp: sha256(bearer token)[:8], "" without a Bearer token.
        account: the account the token maps to, or None.
        headers: lower-cased headers of interest (User-Agent, anthropic-beta, ChatGPT-Account-Id, …).
        status: the status answered.
    """

    method: str
    path: str
    token_fp: str
    account: str | None
    headers: dict[str, str]
    status: int = 0


@dataclass
class Failure:
    """A scripted failure: answer ``status`` with ``headers`` and a JSON ``body``; only on ``path`` if set."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    path: str | None = None


@dataclass
class _Account:
    five_hour: WindowSpec | None = None
    weekly: WindowSpec | None = None
    monthly: WindowSpec | None = None
    plan_type: str = "plus"
    payload: dict | None = None  # raw payload served as-is on either usage endpoint


class ProviderEmulator:
    """Scriptable fake of the providers' usage APIs over real HTTP on loopback.

    Args:
        now: clock for ``reset_after_seconds`` (UTC, tz-aware); defaults to the wall clock.
        host: bind address (127.0.0.1).
    """

    def __init__(self, *, now: Callable[[], datetime] | None = None, host: str = "127.0.0.1") -> None:
        self._now = now or (lambda: datetime.now(timezone.utc))
        self._host = host
        self._port: int | None = None
        self._runner: web.AppRunner | None = None
        self._tokens: dict[str, str] = {}
        self._accounts: dict[str, _Account] = {}
        self._failures: deque[Failure] = deque()
        self.latency_s: float = 0.0
        self.requests: list[RecordedRequest] = []
        self.app = web.Application(middlewares=[self._record_mw, self._fail_mw])
        self.app.router.add_get("/api/oauth/usage", self._anthropic_usage)
        self.app.router.add_get("/backend-api/wham/usage", self._openai_usage)

    # ----------------------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Bind a random port on 127.0.0.1 and serve."""
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, 0)
        await site.start()
        self._port = int(self._runner.addresses[0][1])  # port 0: the OS picked one

    async def stop(self) -> None:
        """Stop serving and release the port."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> ProviderEmulator:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:40123 (no trailing slash)."""
        if self._port is None:
            raise RuntimeError("emulator not started")
        return f"http://{self._host}:{self._port}"

    # ----------------------------------------------------------------------------------------- scripting

    def add_login(self, token: str, account: str) -> None:
        """Accept Bearer ``token`` as ``account`` (for ChatGPT also the expected ``ChatGPT-Account-Id``)."""
        self._tokens[token] = account
        self._accounts.setdefault(account, _Account())

    def revoke(self, token: str) -> None:
        """Forget ``token``: its next request gets 401."""
        self._tokens.pop(token, None)

    def _account(self, token_or_account: str) -> _Account:
        account = self._tokens.get(token_or_account, token_or_account)
        return self._accounts.setdefault(account, _Account())

    def set_usage(self, token_or_account: str, payload: dict | None) -> None:
        """Serve ``payload`` verbatim on both usage endpoints for that account (None: back to windows)."""
        self._account(token_or_account).payload = payload

    def set_windows(
        self,
        account: str,
        *,
        five_hour: WindowSpec | None = None,
        weekly: WindowSpec | None = None,
        monthly: WindowSpec | None = None,
        plan_type: str | None = None,
    ) -> None:
        """Set the account's windows as ``(percent 0-100, resets_at UTC or None)``; None = no such window.

        Rendered as Anthropic ``five_hour`` / ``seven_day`` and ChatGPT ``primary_window`` (five-hour, or
        weekly when there is no five-hour window, as Pro/prolite do) / ``secondary_window`` / ``tertiary_window``.
        Clears a raw payload set with `set_usage`.
        """
        acc = self._account(account)
        acc.five_hour, acc.weekly, acc.monthly, acc.payload = five_hour, weekly, monthly, None
        if plan_type is not None:
            acc.plan_type = plan_type

    def fail_next(
        self,
        n: int,
        status: int,
        headers: Mapping[str, str] | None = None,
        *,
        body: Any = None,
        path: str | None = None,
    ) -> None:
        """Answer the next ``n`` requests (on ``path`` only, if given) with ``status``/``headers``/``body``."""
        for _ in range(n):
            self._failures.append(Failure(status, dict(headers or {}), body, path))

    def count(self, path: str | None = None, token: str | None = None) -> int:
        """Number of recorded requests, optionally filtered by path and by token (compared by fingerprint)."""
        fp = _fp(token) if token is not None else None
        return sum(1 for r in self.requests if (path is None or r.path == path) and (fp is None or r.token_fp == fp))

    # ----------------------------------------------------------------------------------------- helpers

    @staticmethod
    def bearer(request: web.Request) -> str | None:
        auth = request.headers.get("Authorization", "")
        if auth[:7].lower() == "bearer ":
            return auth[7:].strip() or None
        return None

    def account_for(self, request: web.Request) -> str | None:
        """The account the request's Bearer token maps to, or None."""
        token = self.bearer(request)
        return self._tokens.get(token) if token else None

    @web.middleware
    async def _record_mw(self, request: web.Request, handler: Callable) -> web.StreamResponse:
        status = 500
        try:
            resp = await handler(request)
            status = resp.status
            return resp
        except web.HTTPException as e:
            status = e.status
            raise
        finally:
            self.requests.append(
                RecordedRequest(
                    method=request.method,
                    path=request.path,
                    token_fp=_fp(self.bearer(request)),
                    account=self.account_for(request),
                    headers={k: request.headers[k] for k in HEADERS_OF_INTEREST if k in request.headers},
                    status=status,
                )
            )

    @web.middleware
    async def _fail_mw(self, request: web.Request, handler: Callable) -> web.StreamResponse:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        for i, f in enumerate(self._failures):
            if f.path is None or f.path == request.path:
                del self._failures[i]
                body = f.body if f.body is not None else {"error": {"type": "scripted", "status": f.status}}
                return web.Response(
                    status=f.status, headers=f.headers, text=json.dumps(body), content_type="application/json"
                )
        return await handler(request)

    def _resolve(self, request: web.Request) -> tuple[_Account | None, web.Response | None]:
        account = self.account_for(request)
        if account is None:
            return None, web.json_response({"error": {"type": "authentication_error"}}, status=401)
        return self._accounts[account], None

    # ----------------------------------------------------------------------------------------- rendering

    @staticmethod
    def _iso(dt: datetime | None) -> str | None:
        return dt.astimezone(timezone.utc).isoformat(timespec="microseconds") if dt else None

    def _roll(self, acc: _Account) -> None:
        """Like the real providers, a window whose reset instant has passed starts afresh at 0 %."""
        now = self._now()
        for name, length in (("five_hour", timedelta(hours=5)), ("weekly", timedelta(days=7)),
                             ("monthly", timedelta(days=30))):
            spec = getattr(acc, name)
            if spec is not None and spec[1] is not None and spec[1] <= now:
                setattr(acc, name, (0.0, now + length))

    def render_anthropic(self, acc: _Account) -> dict:
        """Anthropic ``/api/oauth/usage`` body for the account (shape of corpus U01/U02)."""
        self._roll(acc)

        def win(spec: WindowSpec | None) -> dict | None:
            return None if spec is None else {"utilization": float(spec[0]), "resets_at": self._iso(spec[1])}

        return {
            "five_hour": win(acc.five_hour),
            "seven_day": win(acc.weekly),
            "seven_day_oauth_apps": None,
            "seven_day_opus": None,
            "extra_usage": {"is_enabled": False, "monthly_limit": None, "used_credits": None, "utilization": None},
        }

    def render_openai(self, acc: _Account) -> dict:
        """ChatGPT ``/backend-api/wham/usage`` body for the account (shape of corpus W01/W02)."""
        self._roll(acc)
        now = self._now()

        def win(spec: WindowSpec, seconds: int) -> dict:
            pct, resets_at = spec
            d: dict[str, Any] = {"used_percent": pct, "limit_window_seconds": seconds}
            if resets_at is not None:
                d["reset_at"] = int(resets_at.timestamp())
                d["reset_after_seconds"] = max(0, int((resets_at - now).total_seconds()))
            return d

        slots = [
            win(s, secs)
            for s, secs in ((acc.five_hour, 18000), (acc.weekly, 604800), (acc.monthly, 2592000))
            if s is not None
        ]
        slots += [None] * (2 - len(slots)) if len(slots) < 2 else []
        rl: dict[str, Any] = {
            "allowed": True,
            "limit_reached": any(s is not None and s[0] >= 100 for s in (acc.five_hour, acc.weekly, acc.monthly)),
        }
        for name, w in zip(("primary_window", "secondary_window", "tertiary_window"), slots):
            rl[name] = w
        return {"plan_type": acc.plan_type, "rate_limit": rl}

    # ----------------------------------------------------------------------------------------- handlers

    async def _anthropic_usage(self, request: web.Request) -> web.Response:
        acc, err = self._resolve(request)
        if err is not None:
            return err
        assert acc is not None
        return web.json_response(acc.payload if acc.payload is not None else self.render_anthropic(acc))

    async def _openai_usage(self, request: web.Request) -> web.Response:
        acc, err = self._resolve(request)
        if err is not None:
            return err
        assert acc is not None
        hdr = request.headers.get("ChatGPT-Account-Id")
        if hdr is not None and hdr != self.account_for(request):
            return web.json_response({"detail": "account mismatch"}, status=403)
        return web.json_response(acc.payload if acc.payload is not None else self.render_openai(acc))
