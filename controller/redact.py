"""The one redactor: masks credential-like text before anything leaves the controller (Events,
status messages, logs, webhooks), and bounds the length AFTER masking, so a token cut in two by a
length limit is still masked. Pure; imports nothing from the package.

Everything that comes out of a box (screen text, file contents) and every provider answer may hold a
token: Claude Code OAuth tokens (`sk-ant-oat01-…`, `sk-ant-ort01-…`), API keys (`sk-…`, `sk-proj-…`),
Codex JWTs (`eyJ…`), bearer headers, `key=value` / `"key": "value"` pairs, webhook URLs (a Slack URL
is itself a credential), URL query strings, and long opaque runs.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

MASK = "[redacted]"

EVENT_MESSAGE_MAX = 1024
"""Longest Event message (characters); the Kubernetes EventRecorder cuts at 1 KiB too."""

STATUS_MESSAGE_MAX = 2048
"""Longest message written into a status condition or a status.tabs[] entry (characters)."""

LOG_MESSAGE_MAX = 4096
"""Longest log message (characters)."""

_KEYS = r"(?:access_token|refresh_token|id_token|accessToken|refreshToken|idToken|api[_-]?key|token|password|secret|authorization|client_secret)"

# Long opaque runs mixing upper case, lower case and digits (Kubernetes names are lower case). Found as
# maximal runs, the mix checked per run: lookaheads in the pattern rescanned the rest of the run at every
# position, quadratic in its length (a 40,000-character screen line held the event loop for 20 s).
_OPAQUE_RUN = re.compile(r"[A-Za-z0-9_\-]{20,}")
_UPPER, _LOWER, _DIGIT = re.compile(r"[A-Z]"), re.compile(r"[a-z]"), re.compile(r"[0-9]")


def _opaque(match: re.Match[str]) -> str:
    run = match.group(0)
    return MASK if _UPPER.search(run) and _LOWER.search(run) and _DIGIT.search(run) else run


# URLs, found whole (each match consumes its run, so many "http://" in one run stay linear): webhook
# URLs (hooks.slack.com/services/..., discord.com/api/webhooks/...) are masked whole; any other URL
# keeps its scheme, host and path and loses its query string (?token=…, ?code=…).
_URL = re.compile(r"https?://[^\s\"'<>]*")
_HOOK = re.compile(r"hooks?\.|/webhooks?/")


def _url(match: re.Match[str]) -> str:
    url = match.group(0)
    if _HOOK.search(url):
        return MASK
    start = url.index("//") + 2
    query, frag = url.find("?", start), url.find("#", start)
    if query > start and (frag < 0 or frag > query):
        return url[:query] + MASK
    return url


# (pattern, keep): `keep` groups are put back in front of the mask (the key name, the separator); a
# callable `keep` is the replacement function.
_PATTERNS: tuple[tuple[re.Pattern[str], Any], ...] = (
    # webhook URLs (a Slack URL is itself a credential) and the query strings of any other URL (see _url)
    (_URL, _url),
    # provider keys and Claude OAuth tokens, whatever their length (a cut-off one too)
    (re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_\-]{2,}"), 0),
    # JWTs and their fragments (Codex id/access tokens)
    (re.compile(r"eyJ[A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_\-]*){0,2}"), 0),
    # Authorization header values
    (re.compile(r"(?i)\b(bearer|basic)(\s+)[^\s\"',}]+"), 2),
    # key=value, key: value, "key": "value"
    (re.compile(r"(?i)\b(" + _KEYS + r")(\"?\s*[=:]\s*\"?)[^\s\"',}&]+"), 2),
    # long opaque runs mixing upper case, lower case and digits (see _opaque)
    (_OPAQUE_RUN, _opaque),
    # long base64 / hex runs (no hyphen: hyphenated names are kept)
    (re.compile(r"[A-Za-z0-9+/]{40,}={0,2}"), 0),
)


def _keep_groups(count: int) -> Callable[[re.Match[str]], str]:
    """A replacement keeping the first ``count`` groups of a match, then :data:`MASK`."""
    def sub(match: re.Match[str]) -> str:
        return "".join(match.group(i) or "" for i in range(1, count + 1)) + MASK
    return sub


def redact(text: str) -> str:
    """`text` with everything that looks like a credential replaced by `[redacted]`.

    Linear in the length of `text` (it runs on screen lines a box controls).

    Args:
        text: any text (screen lines, error messages, file contents).
    Returns:
        The same text, masked; ordinary messages (box names, instants, percentages) are unchanged.
    """
    for pattern, keep in _PATTERNS:
        if callable(keep):
            text = pattern.sub(keep, text)
        elif keep:
            text = pattern.sub(_keep_groups(keep), text)
        else:
            text = pattern.sub(MASK, text)
    return text


def url_for_message(url: str) -> str:
    """``host[:port]/path`` of ``url``, safe for messages, logs and Events: no scheme, no userinfo
    (``user:password@``), no query string or fragment (either can carry a token)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # a port out of range or not a number
        port = None
    return f"{parts.hostname or '?'}{':' + str(port) if port else ''}{parts.path}"


def bounded(text: str, limit: int, *, mark: str = "…") -> str:
    """`text` redacted, THEN cut to at most `limit` characters (ending in `mark` when cut).

    Masking first means no cut can leave a token fragment too short to be recognised.
    """
    clean = redact(text)
    if len(clean) <= limit:
        return clean
    return clean[: max(0, limit - len(mark))] + mark


class RedactingFilter(logging.Filter):
    """A logging filter that masks and bounds every record's message (`bounded(..., LOG_MESSAGE_MAX)`).

    Installed on the handlers of the root logger by `install_log_redaction`, so it covers the
    controller's loggers, kopf's and the client libraries' alike.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken format string: leave it to the handler
            return True
        clean = bounded(message, LOG_MESSAGE_MAX)
        if clean != message:
            record.msg, record.args = clean, ()
        if record.exc_text:
            record.exc_text = bounded(record.exc_text, LOG_MESSAGE_MAX * 4)
        return True


def install_log_redaction(logger: logging.Logger | None = None) -> None:
    """Add one `RedactingFilter` to every handler of `logger` (default: the root logger)."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
