"""Webhook notifications (optional; Kubernetes Events are always posted by the handlers).

One POST per milestone — a tab resumed, a box switched subscription, a reserve stopped agents, a tab needs
a human, a subscription's login was refused (`disconnected`: a human must log in again) — to a URL kept in a
Secret. The Helm chart mounts that Secret as a file and sets
`AGENTBOX_WEBHOOK_URL_FILE`; the file is re-read on every send, so a rotated URL is picked up without a
restart. Two body styles: a generic JSON object, and a Slack-compatible `{"text": ...}` (Slack, Mattermost,
Rocket.Chat, Discord's `/slack` endpoints).

Secrets stay out: the URL (a Slack webhook URL is itself a credential) is never logged, messages pass
through `redact()` before they are sent, and failures are logged with a status code or an exception class
only. Retries (tenacity, jittered exponential backoff) on 5xx, 429 (honouring `Retry-After`), timeouts and
connection errors; any other 4xx is final. `notify` never raises: a lost notification must not stop a
resume.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, get_args

import aiohttp
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential, wait_random

from controller import __version__
from controller import metrics

logger = logging.getLogger(__name__)

Kind = Literal["resume", "switch", "reserve", "needs_attention", "disconnected"]
Style = Literal["generic", "slack"]
KINDS: tuple[str, ...] = get_args(Kind)

USER_AGENT = f"agentbox-controller/{__version__}"

_TITLES: dict[str, tuple[str, str]] = {
    # kind: (Slack emoji, title)
    "resume": (":arrow_forward:", "Resumed"),
    "switch": (":twisted_rightwards_arrows:", "Switched subscription"),
    "reserve": (":octagonal_sign:", "Reserve reached"),
    "needs_attention": (":warning:", "Needs attention"),
    "disconnected": (":electric_plug:", "Login refused: log in again"),
}

# Kinds about a Subscription rather than an AgentBox (the generic body names it `subscription`).
SUBSCRIPTION_KINDS = frozenset({"disconnected"})

# One redactor for Events, status, logs and webhooks (re-exported here for the notifier's callers).
from controller.redact import redact  # noqa: E402


class _Retryable(Exception):
    """Internal: a failed attempt worth repeating (5xx, 429, timeout, connection error)."""

    def __init__(self, what: str, retry_after_s: float | None = None) -> None:
        super().__init__(what)
        self.retry_after_s = retry_after_s


class _Final(Exception):
    """Internal: a failed attempt not worth repeating (4xx other than 429)."""


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (delta or HTTP date): the shared parser, `controller.providers.retry_after`."""
    from datetime import datetime, timezone

    from controller.providers.retry_after import parse_retry_after

    return parse_retry_after(value, datetime.now(timezone.utc))


@dataclass
class Notifier:
    """Posts milestone notifications to a webhook.

    Args:
        url: the webhook URL, or a callable returning it (called on every send; None or "" = off).
        style: "generic" (a JSON object with kind, namespace, box, message, time, ...) or "slack" ({"text": ...}).
        kinds: kinds to send (default: all four).
        cluster: optional cluster name put in the body (helps when several clusters share a channel).
        timeout_s: total timeout of one attempt.
        attempts: attempts per notification (1 = no retry).
        backoff_s: base of the exponential backoff between attempts (capped at 30 s, plus up to 1 s jitter).
        max_retry_after_s: longest `Retry-After` honoured.
        clock: the current instant (UTC), for the body's `time`.
    """

    url: str | Callable[[], str | None] | None
    style: Style = "generic"
    kinds: frozenset[str] = frozenset(KINDS)
    cluster: str = ""
    timeout_s: float = 10.0
    attempts: int = 4
    backoff_s: float = 1.0
    max_retry_after_s: float = 60.0
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(timezone.utc))
    _session: aiohttp.ClientSession | None = field(default=None, init=False, repr=False)
    _tasks: set[asyncio.Task[bool]] = field(default_factory=set, init=False, repr=False)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> "Notifier":
        """Build from the environment (set by the Helm chart):

        * `AGENTBOX_WEBHOOK_URL_FILE`: file holding the URL (the chart mounts the Secret's key there);
          re-read on every send. Else `AGENTBOX_WEBHOOK_URL` (the URL itself). Neither: notifications off.
        * `AGENTBOX_WEBHOOK_STYLE`: `generic` (default) or `slack`.
        * `AGENTBOX_WEBHOOK_KINDS`: comma-separated subset of resume,switch,reserve,needs_attention,disconnected
          (default: all).
        * `AGENTBOX_CLUSTER_NAME`: optional cluster name for the body.

        Raises:
            ValueError: an unknown style or kind.
        """
        env = os.environ if environ is None else environ
        url: str | Callable[[], str | None] | None
        path = env.get("AGENTBOX_WEBHOOK_URL_FILE", "")
        if path:
            url = _file_reader(Path(path))
        else:
            url = env.get("AGENTBOX_WEBHOOK_URL") or None
        style = env.get("AGENTBOX_WEBHOOK_STYLE", "generic") or "generic"
        if style not in get_args(Style):
            raise ValueError(f"AGENTBOX_WEBHOOK_STYLE must be one of {get_args(Style)}, not {style!r}")
        kinds_env = env.get("AGENTBOX_WEBHOOK_KINDS", "")
        kinds = frozenset(k.strip() for k in kinds_env.split(",") if k.strip()) or frozenset(KINDS)
        unknown = kinds - set(KINDS)
        if unknown:
            raise ValueError(f"AGENTBOX_WEBHOOK_KINDS: unknown kinds {sorted(unknown)}; known: {list(KINDS)}")
        return cls(url=url, style=style, kinds=kinds, cluster=env.get("AGENTBOX_CLUSTER_NAME", ""),  # type: ignore[arg-type]
                   **overrides)

    def _url(self) -> str | None:
        url = self.url() if callable(self.url) else self.url
        return url.strip() if url and url.strip() else None

    @property
    def enabled(self) -> bool:
        """True when a URL is configured now."""
        return self._url() is not None

    # ------------------------------------------------------------------ bodies
    def body(self, kind: Kind, namespace: str, box: str, message: str) -> dict[str, Any]:
        """The JSON body for one notification (redacted; never holds a token). `box` is the object's name:
        an AgentBox, or for `disconnected` a Subscription (then the generic body's key is `subscription`)."""
        text = redact(message)
        if self.style == "slack":
            emoji, title = _TITLES[kind]
            where = f"{self.cluster}/" if self.cluster else ""
            return {"text": f"{emoji} *{title}* `{where}{namespace}/{box}`: {text}"}
        body: dict[str, Any] = {
            "source": "agentbox-controller", "version": __version__, "kind": kind,
            "namespace": namespace, ("subscription" if kind in SUBSCRIPTION_KINDS else "box"): box, "message": text,
            "time": self.clock().astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        if self.cluster:
            body["cluster"] = self.cluster
        return body

    # ------------------------------------------------------------------ sending
    async def notify(self, kind: Kind, namespace: str, box: str, message: str) -> bool:
        """Send one notification. Returns True when the webhook accepted it (2xx); False when off,
        filtered out, or failed after the retries. Never raises (except on cancellation)."""
        if kind not in KINDS:
            raise ValueError(f"unknown notification kind {kind!r}")
        if kind not in self.kinds:
            return False
        try:
            url = self._url()
        except OSError as exc:
            logger.warning("Webhook URL file unreadable (%s); notification %s dropped", type(exc).__name__, kind)
            metrics.NOTIFICATIONS.labels(kind, "error").inc()
            return False
        if url is None:
            return False
        payload = json.dumps(self.body(kind, namespace, box, message)).encode()
        try:
            async for attempt in AsyncRetrying(
                    stop=stop_after_attempt(max(1, self.attempts)),
                    wait=self._wait, retry=retry_if_exception_type(_Retryable), reraise=True):
                with attempt:
                    await self._post(url, payload)
        except (_Retryable, _Final) as exc:
            logger.warning("Webhook notification %s for %s/%s failed: %s", kind, namespace, box, exc)
            metrics.NOTIFICATIONS.labels(kind, "error").inc()
            return False
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - never let a notification break the caller
            logger.warning("Webhook notification %s for %s/%s failed (%s)", kind, namespace, box, type(exc).__name__)
            metrics.NOTIFICATIONS.labels(kind, "error").inc()
            return False
        metrics.NOTIFICATIONS.labels(kind, "ok").inc()
        return True

    def schedule(self, kind: Kind, namespace: str, box: str, message: str) -> asyncio.Task[bool] | None:
        """`notify` in a background task (so a slow webhook never delays a resume); None when off.
        The task is kept referenced until done; `aclose()` waits for pending ones."""
        if kind not in self.kinds:
            return None
        task = asyncio.get_running_loop().create_task(self.notify(kind, namespace, box, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _wait(self, state: Any) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, _Retryable) and exc.retry_after_s is not None:
            return min(exc.retry_after_s, self.max_retry_after_s)
        base = wait_exponential(multiplier=self.backoff_s, max=30) + wait_random(0, min(1.0, self.backoff_s))
        return float(base(state))

    async def _post(self, url: str, payload: bytes) -> None:
        session = self._ensure_session()
        try:
            async with session.post(url, data=payload, headers={"Content-Type": "application/json"},
                                    allow_redirects=False) as resp:
                await resp.read()
                if 200 <= resp.status < 300:
                    return
                if resp.status == 429:
                    raise _Retryable("HTTP 429", _retry_after(resp.headers.get("Retry-After")))
                if resp.status >= 500:
                    raise _Retryable(f"HTTP {resp.status}")
                raise _Final(f"HTTP {resp.status}")
        except (aiohttp.ClientConnectionError, asyncio.TimeoutError) as exc:
            # the exception text can hold the URL: keep the class only
            raise _Retryable(type(exc).__name__) from None

    def _ensure_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s, connect=min(5.0, self.timeout_s)),
                headers={"User-Agent": USER_AGENT})
        return self._session

    async def aclose(self) -> None:
        """Wait (briefly) for scheduled notifications, then close the HTTP session."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=self.timeout_s)
        if self._session is not None:
            await self._session.close()
            self._session = None


def _file_reader(path: Path) -> Callable[[], str | None]:
    def read() -> str | None:
        if not path.exists():
            return None
        return path.read_text(encoding="utf-8").strip() or None
    return read
