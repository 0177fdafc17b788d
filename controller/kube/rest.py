"""The Kubernetes REST transport of the controller: one ``aiohttp.ClientSession`` on the event loop.

Why not the official ``kubernetes`` client for the calls themselves: it is synchronous (every call a worker
thread, urllib3's pool behind a lock, the GIL passed between threads) and it builds model objects from the
JSON (``V1Pod`` and back to a dict).  In a 1,000-box burst (bench/scale.py, py-spy) that was about a quarter
of the operator's CPU.  Here a request is a coroutine on the event loop, bodies are JSON in and dicts out,
and every request of the process -- REST calls and the pod exec streams of :mod:`controller.kube.aexec` --
goes through ONE session, so one connection pool (HTTP/1.1 keep-alive) to the API server.

What is kept from the official client: its ``Configuration`` (loaded by :mod:`controller.kube.cluster` from
the service account or a kubeconfig) gives the host, the credentials and TLS.  The bearer token is asked of
``Configuration.auth_settings()`` on every request, which runs the configuration's ``refresh_api_key_hook``
exactly as the official client does before each call: in a pod the service-account token file is re-read
(kubelet rotation; ``load_incluster_config`` re-reads it once a minute), and a kubeconfig ``exec`` or OIDC
credential is renewed when it expires.  Client certificate, CA bundle, ``verify_ssl``, ``assert_hostname``,
``tls_server_name`` and ``proxy`` (with ``proxy_headers``; ``no_proxy`` honoured) are taken from it too.

Errors come out of ONE place, :meth:`Rest.request`: :class:`KubeApiError` with the HTTP ``status`` (0 when no
answer came: connection refused or cut, timeout) and the ``reason`` of the API server's ``Status``
(``NotFound``, ``Conflict``, ``Expired``...).  Its message names the method, the path, the status and the
reason -- never a header (the token), a request or response body, or the server's free-text message.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import ssl
import time
from typing import Any, Mapping
from urllib.parse import quote

import aiohttp

from controller import __version__

logger = logging.getLogger("agentbox.kube")

USER_AGENT = f"agentbox-controller/{__version__}"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
_REASON = re.compile(r"[A-Za-z]{1,64}")
_RETRIED = (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)


class KubeApiError(Exception):
    """A Kubernetes API request failed.

    Attributes:
        status: the HTTP status (404, 409, 410, 422, 5xx...); 0 when no answer came (connection refused or
            cut, TLS failure, timeout).
        reason: the ``reason`` of the API server's ``Status`` object (``NotFound``, ``Conflict``,
            ``AlreadyExists``, ``Expired``, ``Invalid``...), else the HTTP reason phrase; for status 0 the
            exception class (``ClientConnectorError``) or ``Timeout``.
        method: the HTTP method; ``path``: the request path (no query string, no host).
    The message is ``"<method> <path>: HTTP <status> <reason>"``: no header, body or server message (any of
    them can hold a credential: a token, a Secret's data echoed in a validation error).
    """

    def __init__(self, method: str, path: str, status: int, reason: str) -> None:
        self.method, self.path, self.status, self.reason = method, path, status, reason
        super().__init__(f"{method} {path}: HTTP {status} {reason}" if status else
                         f"{method} {path}: no answer ({reason})")


def ssl_context(cfg: Any, host: str | None = None) -> ssl.SSLContext | bool:
    """TLS settings of a ``kubernetes.client.Configuration``: CA bundle, client certificate, verification.

    Returns ``False`` (no TLS) when ``host`` (default: the configuration's) is ``http://``.  Raises
    ``OSError``/``ssl.SSLError`` when a named certificate file cannot be read.
    """
    if not str(host or cfg.host).startswith("https"):
        return False
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert or None)
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file or None)
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif cfg.assert_hostname is False:
        ctx.check_hostname = False
    return ctx


def auth_headers(cfg: Any) -> dict[str, str]:
    """The authentication headers of a ``kubernetes.client.Configuration`` for ONE request.

    ``auth_settings()`` runs the configuration's ``refresh_api_key_hook`` first (the official client does
    the same before each call), so a rotated service-account token or an expired exec/OIDC credential is
    picked up here.  Basic auth (``username``/``password``) is sent when the configuration has it and no
    token.  The values are credentials: never log them.
    """
    headers: dict[str, str] = {}
    for auth in (cfg.auth_settings() or {}).values():
        if auth.get("in") == "header" and auth.get("value"):
            headers[str(auth["key"])] = str(auth["value"])
    if not headers and getattr(cfg, "username", None) and getattr(cfg, "password", None):
        headers["authorization"] = cfg.get_basic_auth_token()
    return headers


def path_of(*parts: str) -> str:
    """``/`` + the parts, each percent-quoted (``path_of("api", "v1", "namespaces", ns)``)."""
    return "/" + "/".join(quote(p, safe="") for p in parts)


class Rest:
    """JSON requests to the Kubernetes API server over one ``aiohttp.ClientSession`` (opened on first use).

    The limits are operator settings (:meth:`from_settings`: ``kube_max_requests``, ``kube_request_timeout_s``,
    ``kube_connect_timeout_s``, ``kube_keepalive_s``); the defaults here are theirs.

    Args:
        configuration: a ``kubernetes.client.Configuration`` (host, credentials, TLS, proxy).
        max_requests: most REST requests in flight at once (they wait for a slot beyond that; 0: no bound).
            The connection pool itself is unbounded, because the pod exec streams sharing it hold one
            connection each for as long as they live; idle keep-alive connections close after ``keepalive_s``.
        timeout_s: total seconds of one request (connect included); ``connect_timeout_s``: of the connect.
        keepalive_s: seconds an idle connection is kept for reuse.
    Attributes:
        requests: requests sent (retries included); ``sessions``: sessions opened (1 in a process's life
            unless :meth:`aclose` was called).
    """

    def __init__(self, configuration: Any, *, max_requests: int = 64, timeout_s: float = 60.0,
                 connect_timeout_s: float = 10.0, keepalive_s: float = 30.0) -> None:
        self.cfg = configuration
        self.host = str(configuration.host).rstrip("/")
        self.timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=connect_timeout_s)
        self.keepalive_s = keepalive_s
        self.max_requests = max_requests
        self._slots = asyncio.Semaphore(max_requests) if max_requests > 0 else None
        self._session: aiohttp.ClientSession | None = None
        self._extra: dict[str, Any] = {}
        proxy = getattr(configuration, "proxy", None)
        if proxy and not _bypasses_proxy(self.host, getattr(configuration, "no_proxy", None) or ""):
            self._extra = {"proxy": proxy}
            if getattr(configuration, "proxy_headers", None):
                self._extra["proxy_headers"] = dict(configuration.proxy_headers)
        if getattr(configuration, "tls_server_name", None) and self.host.startswith("https"):
            self._extra["server_hostname"] = configuration.tls_server_name
        self.requests = 0
        self.sessions = 0

    @classmethod
    def from_settings(cls, configuration: Any, settings: Any) -> "Rest":
        """A transport with the limits of the operator settings (``controller.settings.Settings``:
        ``kube_max_requests``, ``kube_request_timeout_s``, ``kube_connect_timeout_s``, ``kube_keepalive_s``)."""
        return cls(configuration, max_requests=int(settings.kube_max_requests),
                   timeout_s=float(settings.kube_request_timeout_s),
                   connect_timeout_s=float(settings.kube_connect_timeout_s),
                   keepalive_s=float(settings.kube_keepalive_s))

    @property
    def request_options(self) -> dict[str, Any]:
        """Keyword arguments every request of this session needs: ``proxy`` and ``proxy_headers`` when the
        configuration has a proxy that does not bypass the host, ``server_hostname`` for its
        ``tls_server_name``; {} otherwise."""
        return dict(self._extra)

    def session(self) -> aiohttp.ClientSession:
        """The process's one session (one connection pool), created on first use on the running loop."""
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=0, ssl=ssl_context(self.cfg, self.host), keepalive_timeout=self.keepalive_s)
            self._session = aiohttp.ClientSession(connector=connector, headers={"User-Agent": USER_AGENT},
                                                  timeout=self.timeout, raise_for_status=False)
            self.sessions += 1
        return self._session

    def headers(self) -> dict[str, str]:
        """Authentication headers for one request (see :func:`auth_headers`)."""
        return auth_headers(self.cfg)

    async def request(self, method: str, path: str, *, body: Any = None, content_type: str = "application/json",
                      query: Mapping[str, str] | None = None, missing_ok: bool = False) -> Any:
        """Send one request and return the answer's JSON (a dict for every API object).

        Args:
            method: ``GET``, ``POST``, ``PATCH``, ``PUT``, ``DELETE``.
            path: absolute path on the API server (``/api/v1/namespaces/ns/pods/name``), quoted.
            body: JSON-serialisable body (a dict, or a list for a JSON patch); None sends none.
            content_type: of the body (:data:`MERGE_PATCH` for merge patches).
            query: query parameters.
            missing_ok: a 404 returns None instead of raising.
        Returns:
            The decoded JSON of a 2xx answer (None for an empty body, or for a 404 with ``missing_ok``).
        Raises:
            KubeApiError: any other answer, a 2xx answer that is not JSON (reason ``BadResponse``), or no
                answer (status 0).  Connection failures are retried twice (every request the controller
                sends is idempotent or guarded by a precondition: merge patches, deletes with a UID
                precondition, creates answered 409 when they had gone through).
        """
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        started = time.monotonic()
        for attempt in range(3):
            headers = {"Accept": "application/json", **self.headers()}
            if data is not None:
                headers["Content-Type"] = content_type
            self.requests += 1
            try:
                if self._slots is not None:
                    await self._slots.acquire()
                try:
                    async with self.session().request(method, self.host + path, params=query, data=data,
                                                      headers=headers, **self._extra) as resp:
                        status = resp.status
                        raw = await resp.read()
                        phrase = resp.reason or ""
                finally:
                    if self._slots is not None:
                        self._slots.release()
            except _RETRIED as exc:
                if attempt < 2:
                    await asyncio.sleep(0.1 * (attempt + 1))
                    continue
                raise self._failed(method, path, 0, type(exc).__name__, started) from None
            except asyncio.TimeoutError:
                raise self._failed(method, path, 0, "Timeout", started) from None
            except (aiohttp.ClientError, OSError) as exc:
                raise self._failed(method, path, 0, type(exc).__name__, started) from None
            break
        if status == 404 and missing_ok:
            return None
        if status >= 400:
            raise self._failed(method, path, status, _status_reason(raw) or phrase or "Error", started)
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise self._failed(method, path, status, "BadResponse", started) from None

    @staticmethod
    def _failed(method: str, path: str, status: int, reason: str, started: float) -> KubeApiError:
        # DEBUG: the callers log what failed for them (by exception type); the path names the object only.
        logger.debug("kube %s %s failed: status=%s reason=%s duration=%.3fs", method, path, status, reason,
                     time.monotonic() - started)
        return KubeApiError(method, path, status, reason)

    async def aclose(self) -> None:
        """Close the session (its connections); a later request opens a new one."""
        if self._session is not None:
            await self._session.close()
            self._session = None


def _status_reason(raw: bytes) -> str | None:
    """The ``reason`` of a ``Status`` answer when it is a plain word (never its free-text ``message``)."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    reason = doc.get("reason") if isinstance(doc, dict) else None
    return reason if isinstance(reason, str) and _REASON.fullmatch(reason) else None


def _bypasses_proxy(url: str, no_proxy: str) -> bool:
    """The official client's rule: ``url`` is reached directly because ``no_proxy`` names its host."""
    from kubernetes.client.rest import should_bypass_proxies

    return bool(should_bypass_proxies(url, no_proxy))
