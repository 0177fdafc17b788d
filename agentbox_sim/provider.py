"""Provider emulator: an aiohttp server on 127.0.0.1 that answers like Anthropic's and ChatGPT's usage APIs.

Serves (shapes as in tests/fixtures/corpus/usage-payloads.jsonl):
- ``GET /api/oauth/usage`` (Anthropic OAuth usage, as Claude Code 2.1.x reads it);
- ``GET /backend-api/wham/usage`` (ChatGPT usage, as Codex CLI 0.169 reads it).

And the agents' own model calls, so the real CLIs can run against it (notes/real-agents.md):
- ``POST /v1/messages`` (Claude Code, SSE streaming). While the caller's account has a window at
  100 % whose reset is ahead (``set_windows``), the answer is the subscription 429 with the
  ``anthropic-ratelimit-unified-*`` headers (status rejected, reset, representative claim), which makes
  Claude Code print its real limit line; afterwards a short streamed text reply.
- Who a token belongs to: ``GET /api/oauth/profile`` (Anthropic: account and organization uuids) and
  ``GET /backend-api/me`` (ChatGPT: the user id), as the controller's identity check asks them.
- ChatGPT-mode Codex: ``GET /backend-api/wham/accounts/check``, 426 on the WebSocket upgrade of
  ``/backend-api/codex/responses`` (Codex falls back to SSE at once), ``POST`` there (zstd body) with
  SSE replies, or the 429 ``usage_limit_reached`` with ``x-codex-*`` headers while limited. Codex only
  talks HTTPS in that mode: `start_tls()` adds a second port with a test CA made at runtime.
Every model call is recorded in ``turns`` (the last user text and the user texts of the history).

And the OAuth token endpoints the agents refresh their logins with (notes/real-agents.md "Logins"):
- ``POST /v1/oauth/token`` (Claude Code, ``https://platform.claude.com/v1/oauth/token``; reached
  through a CONNECT tunnel, `agentbox_sim.real_agents.TunnelProxy`);
- ``POST /oauth/token`` (Codex, ``https://auth.openai.com/oauth/token``; ``CODEX_REFRESH_TOKEN_URL_OVERRIDE``).
Logins made with `issue_login` have access tokens that expire (401 afterwards) and single-use
refresh tokens: a refresh token presented twice is refused and revokes its whole chain (every
access and refresh token descended from the same login), as the real providers do. Every refresh
is recorded in ``refreshes``.

The Bearer token decides which account is asked (``add_login(token, account)``); unknown tokens get 401.
Per account, either a raw payload (``set_usage``) or windows (``set_windows``, rendered into both shapes).
``fail_next`` scripts failures (5xx / 429 / 401 with headers); ``set_down`` takes the whole API down
(connection refused, 503 from every request, or 429 with ``Retry-After``) until it is called again. Every request is recorded in ``requests``
with a token fingerprint (sha256[:8]) only, never the token.

Extending: routes live on ``self.app`` (created in ``__init__``); a later issue adds the agents'
``/v1/messages`` and ``/responses`` endpoints there before `start()`. Middlewares record requests and
apply scripted failures to every route; use `account_for(request)` to resolve the caller.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import json
import pathlib
import ssl
import time
import uuid
import zlib
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from aiohttp import web

__all__ = ["Failure", "ProviderEmulator", "RecordedRequest", "Refresh", "Turn"]

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
        at: epoch seconds when it arrived.
    """

    method: str
    path: str
    token_fp: str
    account: str | None
    headers: dict[str, str]
    status: int = 0
    at: float = 0.0
    peer_port: int = 0  # the client's source port (which process sent it: bench/shards.py maps it to a replica)


def _peer_port(request: web.Request) -> int:
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    return int(peer[1]) if peer else 0


@dataclass
class Failure:
    """A scripted failure: answer ``status`` with ``headers`` and a JSON ``body``; only on ``path`` if set."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    path: str | None = None


@dataclass(frozen=True)
class Turn:
    """One model call of an agent CLI seen by the emulator.

    Attributes:
        api: "anthropic" (``/v1/messages``) or "openai" (``/responses``).
        account: the account of the Bearer token (None when unknown).
        text: the last user turn's last text (stripped), "" when none.
        history: every user text of the request, oldest first (a resumed conversation repeats earlier ones).
        status: the status answered (200, or 429 while limited).
        at: epoch seconds when it arrived.
        items: number of messages / input items in the request.
    """

    api: str
    account: str | None
    text: str
    history: tuple[str, ...]
    status: int
    at: float
    items: int


@dataclass(frozen=True)
class Refresh:
    """One call of a token endpoint.

    Attributes:
        provider: "anthropic" | "openai".
        account: the account of the refresh token (None when unknown).
        refresh_fp: sha256(refresh token presented)[:8].
        status: the status answered (200, 400/401 refused, or a scripted failure).
        outcome: "ok", "lost" (spent, but the answer was dropped: `drop_next_token_answers`), "reused" (the
            chain was revoked), "revoked", "unknown", "bad_request".
        at: epoch seconds.
        new_access_fp: sha256(new access token)[:8] on success.
    """

    provider: str
    account: str | None
    refresh_fp: str
    status: int
    outcome: str
    at: float
    new_access_fp: str = ""


@dataclass
class _Grant:
    """A refresh token: its account, chain and whether it was spent."""

    provider: str
    account: str
    chain: int
    used: bool = False


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
        self._down: tuple[str, str | None, str | None] | None = None  # set_down(): (mode, retry_after, path)
        self._site: web.TCPSite | None = None
        self.latency_s: float = 0.0
        self.requests: list[RecordedRequest] = []
        self.turns: list[Turn] = []
        self.reply_text: str = "Done. The task is complete."
        self.reply_s: float = 1.5  # how long a streamed reply takes (so the agents' spinners show)
        self._tls_port: int | None = None
        self._ids = itertools.count(1)
        # OAuth: access token expiry (epoch s), refresh tokens, chains (chain -> its tokens).
        self._expires: dict[str, float] = {}
        self._grants: dict[str, _Grant] = {}
        self._chains: dict[int, set[str]] = {}
        self._chain_of: dict[str, int] = {}
        self._chain_ids = itertools.count(1)
        self.token_ttl_s: dict[str, float] = {"anthropic": 28800.0, "openai": 864000.0}
        self.refreshes: list[Refresh] = []
        self._drop_answers = 0
        self._answer_overrides: list[tuple[str, str]] = []
        self.app = web.Application(middlewares=[self._record_mw, self._fail_mw])
        self.app.router.add_get("/api/oauth/usage", self._anthropic_usage)
        self.app.router.add_get("/backend-api/wham/usage", self._openai_usage)
        self.app.router.add_post("/v1/messages", self._anthropic_messages)
        self.app.router.add_get("/backend-api/wham/accounts/check", self._openai_accounts_check)
        self.app.router.add_get("/api/oauth/profile", self._anthropic_profile)
        self.app.router.add_get("/backend-api/me", self._openai_me)
        self.app.router.add_get("/backend-api/codex/responses", self._openai_responses_upgrade)
        self.app.router.add_post("/backend-api/codex/responses", self._openai_responses)
        self.app.router.add_post("/v1/responses", self._openai_responses)
        self.app.router.add_post("/v1/oauth/token", self._anthropic_token)
        self.app.router.add_post("/oauth/token", self._openai_token)

    # ----------------------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Bind a random port on 127.0.0.1 and serve."""
        # Request bodies are decoded by the handlers (Codex sends zstd, which aiohttp cannot decode alone).
        self._runner = web.AppRunner(self.app, access_log=None, auto_decompress=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, 0)
        await site.start()
        self._site = site
        self._port = int(self._runner.addresses[0][1])  # port 0: the OS picked one
        self._tls_port = None

    async def start_tls(self, ca_path: pathlib.Path) -> None:
        """Also serve HTTPS on a second loopback port, with a certificate for 127.0.0.1 signed by a
        test CA generated now; the CA certificate (PEM) is written to ``ca_path`` (for
        ``CODEX_CA_CERTIFICATE`` / ``NODE_EXTRA_CA_CERTS``). Call after `start()`."""
        if self._runner is None:
            raise RuntimeError("emulator not started")
        ca_pem, cert_pem, key_pem = make_test_certificates(self._host, extra_names=TLS_NAMES)
        ca_path = pathlib.Path(ca_path)
        ca_path.parent.mkdir(parents=True, exist_ok=True)
        ca_path.write_bytes(ca_pem)
        chain = ca_path.with_name(ca_path.stem + "-server-chain.pem")
        key = ca_path.with_name(ca_path.stem + "-server-key.pem")
        chain.write_bytes(cert_pem + ca_pem)
        key.write_bytes(key_pem)
        key.chmod(0o600)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(str(chain), str(key))
        site = web.TCPSite(self._runner, self._host, 0, ssl_context=ctx)
        await site.start()
        server = getattr(site, "_server", None)
        self._tls_port = int(server.sockets[0].getsockname()[1]) if server is not None else None

    @property
    def tls_url(self) -> str:
        """HTTPS base URL (after `start_tls()`), e.g. https://127.0.0.1:40124."""
        if self._tls_port is None:
            raise RuntimeError("TLS not started")
        return f"https://{self._host}:{self._tls_port}"

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

    def account_of(self, token: str | None) -> str | None:
        """The account an access token was issued for (None when unknown or revoked)."""
        return self._tokens.get(token) if token else None

    def revoke(self, token: str) -> None:
        """Forget ``token``: its next request gets 401."""
        self._tokens.pop(token, None)

    # ----------------------------------------------------------------------------------------- OAuth logins

    def issue_login(self, provider: str, account: str, ttl_s: float | None = None, *, plan: str = "plus",
                    chain: int | None = None) -> str:
        """A fresh login of ``account`` as the agent's login file text (Claude Code ``.credentials.json``
        for "anthropic", Codex ``auth.json`` for "openai"): an access token expiring in ``ttl_s``
        (default ``token_ttl_s[provider]``) and a single-use refresh token, both registered here."""
        access, refresh, ttl, id_token = self._mint(provider, account, ttl_s, plan, chain)
        now = time.time()
        if provider == "anthropic":
            return json.dumps({"claudeAiOauth": {
                "accessToken": access, "refreshToken": refresh, "expiresAt": int((now + ttl) * 1000),
                "scopes": ["user:inference", "user:profile", "user:sessions:claude_code"],
                "subscriptionType": "max", "rateLimitTier": "default_claude_max_5x"}})
        return json.dumps({"auth_mode": "chatgpt", "OPENAI_API_KEY": None, "tokens": {
            "id_token": id_token, "access_token": access, "refresh_token": refresh, "account_id": account},
            "last_refresh": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))})

    def _mint(self, provider: str, account: str, ttl_s: float | None, plan: str = "plus",
              chain: int | None = None) -> tuple[str, str, float, str]:
        """(access, refresh, ttl, id_token) registered under ``chain`` (a new chain when None)."""
        ttl = float(self.token_ttl_s[provider] if ttl_s is None else ttl_s)
        chain = next(self._chain_ids) if chain is None else chain
        n = next(self._ids)
        now = time.time()
        id_token = ""
        if provider == "anthropic":
            access = f"sk-ant-oat01-emu-{account}-{n:06d}"
            refresh = f"sk-ant-ort01-emu-{account}-{n:06d}"
        else:
            auth = {"chatgpt_plan_type": self._account(account).plan_type or plan, "chatgpt_account_id": account,
                    "chatgpt_user_id": f"user-{account}"}
            exp = int(now + ttl)
            access = _jwt({"exp": exp, "iat": int(now), "sub": f"user-{account}", "jti": f"emu-{n:06d}",
                           "https://api.openai.com/auth": auth})
            id_token = _jwt({"email": f"{account}@example.com", "exp": exp, "iat": int(now),
                             "sub": f"user-{account}", "https://api.openai.com/auth": auth})
            refresh = f"rt_emu-{account}-{n:06d}"
        self.add_login(access, account)
        self._expires[access] = now + ttl
        self._grants[refresh] = _Grant(provider, account, chain)
        self._chains.setdefault(chain, set()).update((access, refresh))
        self._chain_of[access] = self._chain_of[refresh] = chain
        return access, refresh, ttl, id_token

    def expire(self, token: str) -> None:
        """Make an access token expire now (its next request gets 401)."""
        self._expires[token] = time.time()

    def token_valid(self, token: str | None, at: float | None = None) -> bool:
        """``token`` is a known access token, not revoked and not expired (at ``at``, default now)."""
        if not token or token not in self._tokens:
            return False
        exp = self._expires.get(token)
        return exp is None or exp > (time.time() if at is None else at)

    def refresh_spent(self, refresh_token: str) -> bool:
        """The refresh token was used (or its chain revoked)."""
        g = self._grants.get(refresh_token)
        return g is None or g.used

    def _revoke_chain(self, chain: int) -> None:
        for tok in self._chains.get(chain, set()):
            self._tokens.pop(tok, None)
            g = self._grants.get(tok)
            if g is not None:
                g.used = True

    async def _form(self, request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        if "json" in request.headers.get("Content-Type", ""):
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                return {}
            return body if isinstance(body, dict) else {}
        from urllib.parse import parse_qsl

        return dict(parse_qsl(raw.decode("utf-8", "replace")))

    async def _token(self, provider: str, request: web.Request) -> tuple[_Grant | None, str, web.Response | None]:
        """Spend the presented refresh token: (grant, token, None) or (None, token, refusal)."""
        body = await self._form(request)
        rt = body.get("refresh_token")
        now = time.time()

        def refuse(status: int, outcome: str, account: str | None, error: dict) -> web.Response:
            self.refreshes.append(Refresh(provider, account, _fp(rt if isinstance(rt, str) else None), status,
                                          outcome, now))
            return web.json_response(error, status=status)

        if body.get("grant_type") != "refresh_token" or not isinstance(rt, str) or not rt:
            return None, "", refuse(400, "bad_request", None, {"error": "invalid_request"})
        grant = self._grants.get(rt)
        if grant is None or grant.provider != provider:
            err = ({"error": "invalid_grant", "error_description": "Invalid refresh token"} if provider == "anthropic"
                   else {"error": {"code": "refresh_token_invalidated", "message": "Invalid refresh token"}})
            return None, rt, refuse(400 if provider == "anthropic" else 401, "unknown", None, err)
        if grant.used:
            # A second use of a single-use refresh token: the whole chain is logged out.
            chain_alive = any(t in self._tokens for t in self._chains.get(grant.chain, set()))
            self._revoke_chain(grant.chain)
            err = ({"error": "invalid_grant", "error_description": "Refresh token already used"}
                   if provider == "anthropic" else
                   {"error": {"code": "refresh_token_reused", "message": "Refresh token has already been used"}})
            return None, rt, refuse(400 if provider == "anthropic" else 401, "reused" if chain_alive else "revoked",
                                    grant.account, err)
        grant.used = True
        return grant, rt, None

    def drop_next_token_answers(self, n: int = 1) -> None:
        """The next ``n`` successful refreshes spend the refresh token and mint the new tokens, then drop
        the connection instead of answering (a lost answer: the token is spent, the caller never learns
        the new ones). Recorded with outcome "lost"."""
        self._drop_answers += n

    def override_next_token_answer(self, field: str, raw_json: str) -> None:
        """The next successful refresh answer carries ``field`` with the raw JSON text ``raw_json``
        (e.g. ``"1e999"``, ``"-5"``, ``"NaN"``, ``'"soon"'``), as a misbehaving provider might send."""
        self._answer_overrides.append((field, raw_json))

    def _answer(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        """A token answer, possibly dropped or altered as scripted."""
        if self._drop_answers > 0:
            self._drop_answers -= 1
            if request.transport is not None:
                request.transport.close()
            raise ConnectionResetError("answer dropped (scripted)")
        if self._answer_overrides:
            field, raw = self._answer_overrides.pop(0)
            body = {k: v for k, v in body.items() if k != field}
            text = json.dumps(body)[:-1] + f', "{field}": {raw}}}'
            return web.Response(text=text, content_type="application/json")
        return web.json_response(body)

    async def _anthropic_token(self, request: web.Request) -> web.Response:
        grant, rt, err = await self._token("anthropic", request)
        if err is not None:
            return err
        assert grant is not None
        access, refresh, ttl, _ = self._mint("anthropic", grant.account, None, chain=grant.chain)
        self.refreshes.append(Refresh("anthropic", grant.account, _fp(rt), 200,
                                      "lost" if self._drop_answers else "ok", time.time(), _fp(access)))
        acct_uuid = str(uuid.uuid5(uuid.NAMESPACE_URL, grant.account))
        return self._answer(request, {
            "token_type": "Bearer", "access_token": access, "refresh_token": refresh, "expires_in": int(ttl),
            "scope": "user:inference user:profile user:sessions:claude_code",
            "organization": {"uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, grant.account + "/org")),
                             "name": "Emulated Org"},
            "account": {"uuid": acct_uuid, "email_address": f"{grant.account}@example.com"}})

    async def _openai_token(self, request: web.Request) -> web.Response:
        grant, rt, err = await self._token("openai", request)
        if err is not None:
            return err
        assert grant is not None
        access, refresh, _, id_token = self._mint("openai", grant.account, None, chain=grant.chain)
        self.refreshes.append(Refresh("openai", grant.account, _fp(rt), 200,
                                      "lost" if self._drop_answers else "ok", time.time(), _fp(access)))
        return self._answer(request, {"id_token": id_token, "access_token": access, "refresh_token": refresh})

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

    async def set_down(self, mode: str | None, *, retry_after: str | None = None, path: str | None = None) -> None:
        """Take the provider's API down (until called with ``mode=None``), as a real one fails:

        * ``"refuse"``: the host's service is gone: the plain port stops listening (new connections are
          refused) and every open keep-alive connection is reset at its next request. ``path`` must be None.
        * ``"5xx"``: every request (on ``path`` only, if given) answered ``503 Service Unavailable`` with an
          HTML body, as a load balancer without a healthy backend answers.
        * ``"429"``: every request (on ``path`` only, if given) answered ``429 Too Many Requests`` with
          ``Retry-After: <retry_after>`` (seconds or an HTTP date; absent when None) and the provider's
          ``rate_limit_error`` body.

        Requests answered while down are recorded in ``requests`` (with their status; a reset keep-alive
        request as 503) like any other; a refused connection never reaches the server and is not recorded.
        """
        if mode not in (None, "refuse", "5xx", "429"):
            raise ValueError(f"unknown mode {mode!r}")
        if mode == "refuse" and path is not None:
            raise ValueError("a refused connection cannot be limited to a path")
        was = self._down
        self._down = (mode, retry_after, path) if mode else None
        if mode == "refuse" and self._site is not None:
            await self._site.stop()
            self._site = None
        if (was is not None and was[0] == "refuse") and mode != "refuse" and self._runner is not None:
            self._site = web.TCPSite(self._runner, self._host, self._port, reuse_address=True)
            await self._site.start()

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
        arrived = time.time()
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
                    at=arrived,
                    peer_port=_peer_port(request),
                )
            )

    @web.middleware
    async def _fail_mw(self, request: web.Request, handler: Callable) -> web.StreamResponse:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        down = self._down
        if down is not None and (down[2] is None or down[2] == request.path):
            mode, retry_after, _ = down
            if mode == "refuse":  # a keep-alive connection to a server that went away: reset
                if request.transport is not None:
                    request.transport.abort()
                raise web.HTTPServiceUnavailable()  # never delivered: the connection is gone
            if mode == "5xx":
                return web.Response(status=503, content_type="text/html",
                                    text="<html><body><h1>503 Service Unavailable</h1></body></html>")
            headers = {"Retry-After": retry_after} if retry_after is not None else {}
            return web.json_response({"type": "error", "error": {"type": "rate_limit_error",
                                                                 "message": "Rate limited. Please try again later."}},
                                     status=429, headers=headers)
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
        token = self.bearer(request)
        if account is not None and token in self._expires and not self.token_valid(token):
            return None, web.json_response({"error": {"type": "authentication_error",
                                                      "message": "OAuth token has expired."}}, status=401)
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

    # ----------------------------------------------------------------------------------------- agents' model calls

    def limited(self, acc: _Account) -> tuple[str, _Account, datetime] | None:
        """(claim, account, reset) when a window of the account is at 100 % with its reset ahead."""
        self._roll(acc)
        now = self._now()
        hit = [(name, spec[1]) for name, spec in (("five_hour", acc.five_hour), ("seven_day", acc.weekly),
                                                  ("monthly", acc.monthly))
               if spec is not None and spec[0] >= 100 and spec[1] is not None and spec[1] > now]
        if not hit:
            return None
        claim, reset = max(hit, key=lambda h: h[1])  # with several windows rejected the latest reset wins
        return claim, acc, reset

    def user_turns(self, api: str | None = None, account: str | None = None) -> list[str]:
        """The last user texts of the recorded model calls (optionally of one api / account)."""
        return [t.text for t in self.turns if (api is None or t.api == api) and (account is None or t.account == account)]

    @staticmethod
    async def _json_body(request: web.Request) -> Any:
        raw = await request.read()
        enc = request.headers.get("Content-Encoding", "").lower()
        if enc == "zstd":
            import zstandard

            raw = zstandard.ZstdDecompressor().decompressobj().decompress(raw)
        elif enc in ("gzip", "deflate"):
            raw = zlib.decompress(raw, 47)
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return {}

    def _record_turn(self, api: str, request: web.Request, texts: list[str], items: int, status: int) -> None:
        self.turns.append(Turn(api, self.account_for(request) if api == "anthropic" else self._openai_account(request),
                               texts[-1] if texts else "", tuple(texts), status, time.time(), items))

    def _openai_account(self, request: web.Request) -> str | None:
        return self.account_for(request)

    # Anthropic ------------------------------------------------------------------------------

    @staticmethod
    def _anthropic_user_texts(body: dict) -> list[str]:
        out: list[str] = []
        for msg in body.get("messages") or []:
            if not isinstance(msg, dict) or msg.get("role") != "user":
                continue
            content = msg.get("content")
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
            texts = [b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
            out += [t.strip() for t in texts if t.strip() and not t.lstrip().startswith("<system-reminder>")]
        return out

    def _unified_headers(self, claim: str, acc: _Account, reset: datetime) -> dict[str, str]:
        now = self._now()
        epoch = str(int(reset.timestamp()))
        h = {
            "anthropic-ratelimit-unified-status": "rejected",
            "anthropic-ratelimit-unified-reset": epoch,
            "anthropic-ratelimit-unified-representative-claim": claim,
            "anthropic-ratelimit-unified-overage-status": "rejected",
            "anthropic-ratelimit-unified-overage-disabled-reason": "org_level_disabled",
            "anthropic-ratelimit-unified-fallback-percentage": "0.5",
            "retry-after": str(max(1, int((reset - now).total_seconds()))),
        }
        for short, spec in (("5h", acc.five_hour), ("7d", acc.weekly)):
            if spec is None:
                continue
            pct, at = spec
            h[f"anthropic-ratelimit-unified-{short}-status"] = "rejected" if pct >= 100 else "allowed"
            h[f"anthropic-ratelimit-unified-{short}-utilization"] = f"{pct / 100:.2f}"
            if at is not None:
                h[f"anthropic-ratelimit-unified-{short}-reset"] = str(int(at.timestamp()))
        return h

    def _allowed_headers(self, acc: _Account) -> dict[str, str]:
        h = {"anthropic-ratelimit-unified-status": "allowed"}
        for short, spec in (("5h", acc.five_hour), ("7d", acc.weekly)):
            if spec is None:
                continue
            h[f"anthropic-ratelimit-unified-{short}-status"] = "allowed"
            h[f"anthropic-ratelimit-unified-{short}-utilization"] = f"{spec[0] / 100:.2f}"
            if spec[1] is not None:
                h[f"anthropic-ratelimit-unified-{short}-reset"] = str(int(spec[1].timestamp()))
        return h

    async def _anthropic_messages(self, request: web.Request) -> web.StreamResponse:
        body = await self._json_body(request)
        texts = self._anthropic_user_texts(body) if isinstance(body, dict) else []
        items = len(body.get("messages") or []) if isinstance(body, dict) else 0
        acc, err = self._resolve(request)
        if err is not None:
            self._record_turn("anthropic", request, texts, items, err.status)
            return err
        assert acc is not None
        hit = self.limited(acc)
        if hit is not None:
            self._record_turn("anthropic", request, texts, items, 429)
            claim, _, reset = hit
            return web.json_response(
                {"type": "error", "error": {"type": "rate_limit_error",
                                            "message": "This request would exceed your account's rate limit. "
                                                       "Please try again later."}},
                status=429, headers=self._unified_headers(claim, acc, reset))
        self._record_turn("anthropic", request, texts, items, 200)
        model = body.get("model", "claude-sonnet-4-5") if isinstance(body, dict) else "claude-sonnet-4-5"
        msg_id = f"msg_emu{next(self._ids):06d}"
        words = self.reply_text.split(" ")
        usage = {"input_tokens": 12, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        if not (isinstance(body, dict) and body.get("stream")):
            return web.json_response({
                "id": msg_id, "type": "message", "role": "assistant", "model": model,
                "content": [{"type": "text", "text": self.reply_text}], "stop_reason": "end_turn",
                "stop_sequence": None, "usage": {**usage, "output_tokens": len(words)}},
                headers=self._allowed_headers(acc))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "request-id": f"req_emu{next(self._ids):06d}", **self._allowed_headers(acc)})
        await resp.prepare(request)

        async def event(name: str, data: dict) -> None:
            await resp.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())

        try:
            await self._stream_anthropic(event, msg_id, model, usage, words)
            await resp.write_eof()
        except ConnectionError:
            pass  # the CLI went away mid-reply (stopped, or Esc)
        return resp

    async def _stream_anthropic(self, event: Callable, msg_id: str, model: str, usage: dict, words: list[str]) -> None:
        await event("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": usage}})
        await event("content_block_start", {"type": "content_block_start", "index": 0,
                                            "content_block": {"type": "text", "text": ""}})
        for i, word in enumerate(words):
            await asyncio.sleep(self.reply_s / max(1, len(words)))
            await event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                "delta": {"type": "text_delta", "text": word if i == 0 else " " + word}})
        await event("content_block_stop", {"type": "content_block_stop", "index": 0})
        await event("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                      "usage": {"output_tokens": len(words)}})
        await event("message_stop", {"type": "message_stop"})

    # ChatGPT / Codex ------------------------------------------------------------------------

    async def _openai_accounts_check(self, request: web.Request) -> web.Response:
        acc, err = self._resolve(request)
        if err is not None:
            return err
        assert acc is not None
        account = self.account_for(request)
        return web.json_response({"accounts": [{
            "id": account, "plan_type": acc.plan_type, "workspace_backend_origin": "NO_CONSTRAINT",
            "account_routing_override": "NO_CONSTRAINT"}]})

    async def _anthropic_profile(self, request: web.Request) -> web.Response:
        """``GET /api/oauth/profile`` (Claude Code after a login): who the OAuth token belongs to."""
        acc, err = self._resolve(request)
        if err is not None:
            return err
        account = self.account_for(request) or ""
        return web.json_response({
            "account": {"uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, account)), "email": f"{account}@example.com",
                        "full_name": account, "display_name": account, "has_claude_max": True,
                        "has_claude_pro": False},
            "organization": {"uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, account + "/org")), "name": "Emulated Org",
                             "organization_type": "claude_max", "billing_type": "stripe_subscription",
                             "rate_limit_tier": "default_claude_max_5x"}})

    async def _openai_me(self, request: web.Request) -> web.Response:
        """``GET /backend-api/me`` (ChatGPT): the signed-in user of the token."""
        acc, err = self._resolve(request)
        if err is not None:
            return err
        account = self.account_for(request) or ""
        return web.json_response({"object": "user", "id": f"user-{account}", "email": f"{account}@example.com",
                                  "name": account})

    async def _openai_responses_upgrade(self, request: web.Request) -> web.Response:
        # No WebSocket transport here: 426 makes Codex fall back to SSE over POST at once.
        return web.json_response({"error": {"type": "upgrade_required"}}, status=426)

    @staticmethod
    def _openai_user_texts(body: dict) -> list[str]:
        out: list[str] = []
        for item in body.get("input") or []:
            if not isinstance(item, dict) or item.get("role") != "user":
                continue
            content = item.get("content")
            blocks = [{"type": "input_text", "text": content}] if isinstance(content, str) else content or []
            texts = [b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") in ("input_text", "text")]
            texts = [t.strip() for t in texts if t.strip() and not t.lstrip().startswith(("<environment_context>",
                                                                                           "<user_instructions>",
                                                                                           "# AGENTS.md",
                                                                                           "<permissions"))]
            out += texts
        return out

    def _codex_headers(self, acc: _Account) -> dict[str, str]:
        now = self._now()
        h: dict[str, str] = {}
        slots = [(s, mins) for s, mins in ((acc.five_hour, 300), (acc.weekly, 10080), (acc.monthly, 43200))
                 if s is not None]
        for name, (spec, mins) in zip(("primary", "secondary"), slots):
            pct, at = spec
            h[f"x-codex-{name}-used-percent"] = f"{float(pct):.1f}"
            h[f"x-codex-{name}-window-minutes"] = str(mins)
            if at is not None:
                h[f"x-codex-{name}-reset-after-seconds"] = str(max(0, int((at - now).total_seconds())))
                h[f"x-codex-{name}-reset-at"] = str(int(at.timestamp()))
        return h

    async def _openai_responses(self, request: web.Request) -> web.StreamResponse:
        body = await self._json_body(request)
        texts = self._openai_user_texts(body) if isinstance(body, dict) else []
        items = len(body.get("input") or []) if isinstance(body, dict) else 0
        acc, err = self._resolve(request)
        if err is not None:
            self._record_turn("openai", request, texts, items, err.status)
            return err
        assert acc is not None
        hit = self.limited(acc)
        if hit is not None:
            self._record_turn("openai", request, texts, items, 429)
            _, _, reset = hit
            now = self._now()
            return web.json_response({"error": {
                "type": "usage_limit_reached", "message": "The usage limit has been reached",
                "plan_type": acc.plan_type, "resets_at": int(reset.timestamp()),
                "resets_in_seconds": max(0, int((reset - now).total_seconds()))}},
                status=429, headers=self._codex_headers(acc))
        self._record_turn("openai", request, texts, items, 200)
        resp_id = f"resp_emu{next(self._ids):06d}"
        item_id = f"msg_emu{next(self._ids):06d}"
        words = self.reply_text.split(" ")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           **self._codex_headers(acc)})
        await resp.prepare(request)

        async def event(data: dict) -> None:
            await resp.write(f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode())

        try:
            await self._stream_openai(event, resp_id, item_id, words)
            await resp.write_eof()
        except ConnectionError:
            pass  # the CLI went away mid-reply
        return resp

    async def _stream_openai(self, event: Callable, resp_id: str, item_id: str, words: list[str]) -> None:
        await event({"type": "response.created", "response": {"id": resp_id}})
        await event({"type": "response.output_item.added", "output_index": 0, "item": {
            "type": "message", "id": item_id, "role": "assistant", "status": "in_progress", "content": []}})
        for i, word in enumerate(words):
            await asyncio.sleep(self.reply_s / max(1, len(words)))
            await event({"type": "response.output_text.delta", "item_id": item_id, "output_index": 0,
                         "content_index": 0, "delta": word if i == 0 else " " + word})
        await event({"type": "response.output_item.done", "output_index": 0, "item": {
            "type": "message", "id": item_id, "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": self.reply_text, "annotations": []}]}})
        await event({"type": "response.completed", "response": {"id": resp_id, "usage": {
            "input_tokens": 12, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": len(words),
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 12 + len(words)}}})


def _jwt(claims: dict[str, Any]) -> str:
    """An unsigned-looking JWT (Codex reads only the claims)."""
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    return ".".join((b64(json.dumps({"alg": "RS256", "typ": "JWT"}).encode()), b64(json.dumps(claims).encode()),
                     b64(b"emulator-signature")))


# Host names the test certificate also covers: the agents' token endpoints, reached through a
# CONNECT tunnel to this emulator (agentbox_sim.real_agents.TunnelProxy).
TLS_NAMES = ("platform.claude.com", "auth.openai.com")


def make_test_certificates(host: str = "127.0.0.1",
                           extra_names: tuple[str, ...] = ()) -> tuple[bytes, bytes, bytes]:
    """A throwaway CA and a server certificate for ``host`` (IP and localhost SANs, plus
    ``extra_names``), as PEM:
    (ca certificate, server certificate, server private key). Needs the ``cryptography`` package."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.now(timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agentbox provider emulator test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(hours=1))
          .not_valid_after(now + timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName("localhost"), *(x509.DNSName(n) for n in extra_names)]
    try:
        sans.append(x509.IPAddress(ipaddress.ip_address(host)))
    except ValueError:
        sans.append(x509.DNSName(host))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1)).not_valid_after(now + timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    return (ca.public_bytes(pem), cert.public_bytes(pem),
            key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
