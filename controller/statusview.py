"""The fleet at a glance: AgentBoxes and Subscriptions as `agentbox-controller status` shows them (pure).

`build_view(boxes, subscriptions, now)` turns the API objects (dicts as the API server returns them) into
one JSON-able view; `render_table(view, wide)` draws it for a terminal. No I/O, the instant is passed in.

Shapes (the `-o json` output is `build_view`'s dict):

    {"now": RFC 3339,
     "subscriptions": [{"namespace", "name", "provider", "account", "state", "message",
                        "windows": {"fiveHour"|"weekly": {"utilization": percent 0-100+, "resetsAt": RFC 3339|None,
                                                          "resetsInSeconds": float|None, "stopsAt": percent}},
                        "reserve": {"fiveHourPercent", "weeklyPercent"}, "threshold": sentence,
                        "reservedUntil", "loginExpiresAt", "loginExpiresInSeconds", "readAt",
                        "attention": [sentence]}],
     "boxes": [{"namespace", "name", "agent", "state", "ready", "subscription", "nextSubscription", "route",
                "resumeAt", "resumeInSeconds", "pod",
                "tabs": [{"name", "state", "resumeAt", "resumeInSeconds", "message"}],
                "attention": [sentence]}]}
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from controller.domain.subscription import threshold_sentence

BAR_CELLS = 10
WINDOWS = (("fiveHour", "5-hour"), ("weekly", "weekly"))


def _parse(ts: Any) -> datetime | None:
    if not isinstance(ts, str) or not ts:
        return None
    try:
        at = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)


def _seconds_until(ts: Any, now: datetime) -> float | None:
    at = _parse(ts)
    return None if at is None else (at - now).total_seconds()


def duration(seconds: float | None) -> str:
    """A short human duration: `45s`, `12m`, `2h05m`, `3d4h`; negative → `ago` form; None → `?`."""
    if seconds is None:
        return "?"
    past = seconds < 0
    s = int(abs(seconds))
    if s < 60:
        text = f"{s}s"
    elif s < 3600:
        text = f"{s // 60}m"
    elif s < 86400:
        text = f"{s // 3600}h{(s % 3600) // 60:02d}m"
    else:
        text = f"{s // 86400}d{(s % 86400) // 3600}h"
    return f"{text} ago" if past else text


def bar(percent: float | None, stops_at: float = 100.0, cells: int = BAR_CELLS) -> str:
    """`███████░░░` for `percent` (0-100, clamped), with `|` at the reserve's stop point when below 100."""
    if percent is None:
        return "·" * cells
    filled = max(0, min(cells, round(percent / 100 * cells)))
    chars = ["█"] * filled + ["░"] * (cells - filled)
    if stops_at < 100:
        mark = max(0, min(cells - 1, round(stops_at / 100 * cells)))
        if mark >= filled:
            chars[mark] = "|"
    return "".join(chars)


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type", ""): c for c in ((obj.get("status") or {}).get("conditions") or []) if isinstance(c, dict)}


def _subscription(obj: dict[str, Any], now: datetime) -> dict[str, Any]:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    reserve = spec.get("reserve") or {}
    five, weekly = int(reserve.get("fiveHourPercent") or 0), int(reserve.get("weeklyPercent") or 0)
    stops = {"fiveHour": 100.0 - five, "weekly": 100.0 - weekly}
    windows: dict[str, Any] = {}
    for key, _ in WINDOWS:
        w = (status.get("windows") or {}).get(key)
        if isinstance(w, dict):
            windows[key] = {"utilization": w.get("utilization"), "resetsAt": w.get("resetsAt"),
                            "resetsInSeconds": _seconds_until(w.get("resetsAt"), now), "stopsAt": stops[key]}
    conds = _conditions(obj)
    attention = []
    for type_ in ("CredentialsValid", "LoginRefreshed", "UsageFetched"):
        c = conds.get(type_)
        if c and c.get("status") == "False" and c.get("reason") not in ("Throttled",):
            attention.append(f"{type_}=False ({c.get('reason')}): {c.get('message', '')}".rstrip(": "))
    if status.get("state") == "Disconnected":
        attention.insert(0, "Disconnected: log in again and update the login Secret")
    return {
        "namespace": meta.get("namespace", ""), "name": meta.get("name", ""), "provider": spec.get("provider"),
        "account": spec.get("displayName"), "state": status.get("state") or "Unknown",
        "message": status.get("message"), "windows": windows,
        "reserve": {"fiveHourPercent": five, "weeklyPercent": weekly},
        "threshold": status.get("threshold") or threshold_sentence(five, weekly),
        "reservedUntil": status.get("reservedUntil"),
        "loginExpiresAt": status.get("loginExpiresAt"),
        "loginExpiresInSeconds": _seconds_until(status.get("loginExpiresAt"), now),
        "readAt": status.get("readAt"), "attention": attention,
    }


def route(current: str | None, nxt: str | None) -> str:
    """`on A · next B` (`on A` without a next; `-` without a subscription)."""
    if not current:
        return "-"
    return f"on {current} · next {nxt}" if nxt and nxt != current else f"on {current}"


def _box(obj: dict[str, Any], now: datetime) -> dict[str, Any]:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    conds = _conditions(obj)
    tabs = []
    for t in status.get("tabs") or []:
        if isinstance(t, dict):
            tabs.append({"name": t.get("name", ""), "state": t.get("state", "Unknown"), "resumeAt": t.get("resumeAt"),
                         "resumeInSeconds": _seconds_until(t.get("resumeAt"), now), "message": t.get("message")})
    attention = []
    na = conds.get("NeedsAttention")
    if na and na.get("status") == "True":
        attention.append(f"NeedsAttention ({na.get('reason')}): {na.get('message', '')}".rstrip(": "))
    ready = conds.get("Ready")
    if ready and ready.get("status") == "False":
        attention.append(f"Ready=False ({ready.get('reason')}): {ready.get('message', '')}".rstrip(": "))
    current = status.get("subscription") or spec.get("subscription")
    return {
        "namespace": meta.get("namespace", ""), "name": meta.get("name", ""), "agent": spec.get("agent"),
        "state": status.get("state") or "Pending", "ready": (ready or {}).get("status", "Unknown"),
        "subscription": current, "nextSubscription": status.get("nextSubscription"),
        "route": route(current, status.get("nextSubscription")),
        "resumeAt": status.get("resumeAt"), "resumeInSeconds": _seconds_until(status.get("resumeAt"), now),
        "pod": status.get("pod"), "tabs": tabs, "attention": attention,
    }


def build_view(boxes: list[dict[str, Any]], subscriptions: list[dict[str, Any]], now: datetime) -> dict[str, Any]:
    """The view of `boxes` (AgentBox objects) and `subscriptions` (Subscription objects) at `now` (UTC),
    sorted by namespace and name. Missing or malformed status fields show as unknown, never raise."""
    key = lambda o: ((o.get("metadata") or {}).get("namespace", ""), (o.get("metadata") or {}).get("name", ""))  # noqa: E731
    return {
        "now": now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "subscriptions": [_subscription(s, now) for s in sorted(subscriptions, key=key)],
        "boxes": [_box(b, now) for b in sorted(boxes, key=key)],
    }


def _window_cell(w: dict[str, Any] | None) -> str:
    if not w:
        return "·" * BAR_CELLS + "    -"
    pct = w.get("utilization")
    text = f"{bar(pct, w.get('stopsAt', 100.0))} {pct:>3.0f}%" if isinstance(pct, (int, float)) else bar(None) + "    ?"
    if w.get("resetsInSeconds") is not None:
        text += f" resets in {duration(w['resetsInSeconds'])}" if w["resetsInSeconds"] >= 0 else " reset passed"
    return text


def _tab_cell(t: dict[str, Any]) -> str:
    text = f"{t['name']} {t['state']}"
    if t.get("resumeInSeconds") is not None and t["state"] in ("RateLimited", "Resuming"):
        text += f" (resume in {duration(t['resumeInSeconds'])})"
    return text


def _table(header: list[str], rows: list[list[str]], notes: dict[int, list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    out = [line(header)]
    indent = " " * (widths[0] + 2)
    for i, r in enumerate(rows):
        out.append(line(r))
        out.extend(indent + n for n in notes.get(i, []))
    return out


def render_table(view: dict[str, Any], wide: bool = False, all_namespaces: bool = True) -> str:
    """The view as two tables (SUBSCRIPTIONS, BOXES), with the reserve sentence and anything that needs a
    human on indented lines under its row. `wide` adds account, login expiry instant, pod and tab messages."""
    ns_col = ["NAMESPACE"] if all_namespaces else []
    out: list[str] = []
    subs = view["subscriptions"]
    if subs:
        header = [*ns_col, "SUBSCRIPTION", "PROVIDER", "STATE", "5-HOUR", "WEEKLY", "LOGIN EXPIRES"]
        if wide:
            header.append("ACCOUNT")
        rows, notes = [], {}
        for i, s in enumerate(subs):
            login = duration(s["loginExpiresInSeconds"]) if s["loginExpiresInSeconds"] is not None else "-"
            if s["loginExpiresInSeconds"] is not None:
                login = f"in {login}" if s["loginExpiresInSeconds"] >= 0 else f"expired {login}"
            row = [*([s["namespace"]] if all_namespaces else []), s["name"], s["provider"] or "?", s["state"],
                   _window_cell(s["windows"].get("fiveHour")), _window_cell(s["windows"].get("weekly")), login]
            if wide:
                row.append(s["account"] or "")
            rows.append(row)
            lines = []
            if s["reserve"]["fiveHourPercent"] or s["reserve"]["weeklyPercent"] or wide:
                lines.append(f"reserve: {s['threshold']}")
            if s["state"] in ("Reserved", "Exhausted") and s.get("message"):
                lines.append(s["message"])
            if wide and s["loginExpiresAt"]:
                lines.append(f"login expires at {s['loginExpiresAt']}")
            lines.extend(f"! {a}" for a in s["attention"])
            notes[i] = lines
        out += _table(header, rows, notes)
    boxes = view["boxes"]
    if boxes:
        if out:
            out.append("")
        header = [*ns_col, "BOX", "AGENT", "READY", "STATE", "SUBSCRIPTION", "TABS"]
        if wide:
            header.append("POD")
        rows, notes = [], {}
        for i, b in enumerate(boxes):
            tabs = ", ".join(_tab_cell(t) for t in b["tabs"]) or "-"
            row = [*([b["namespace"]] if all_namespaces else []), b["name"], b["agent"] or "?", b["ready"], b["state"],
                   b["route"], tabs]
            if wide:
                row.append(b["pod"] or "-")
            rows.append(row)
            lines = []
            if wide:
                lines += [f"{t['name']}: {t['message']}" for t in b["tabs"] if t.get("message")]
            lines += [f"! {a}" for a in b["attention"]]
            notes[i] = lines
        out += _table(header, rows, notes)
    if not out:
        return "No AgentBoxes or Subscriptions found.\n"
    return "\n".join(out) + "\n"
