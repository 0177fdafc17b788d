"""Provider login formats live in the provider adapters (`controller.providers.loginfile`): the login keeper
(`service/logins.py`) grafts, marks and compares login files only through `login_file(provider)` and names
no format key itself."""

from __future__ import annotations

import ast
import base64
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from controller.providers.credentials import parse_login
from controller.providers.loginfile import MARKER_KEY, UnknownProvider, login_file
from controller.service import loginadopt, loginidentity, loginpush, loginrefresh, logins, loginscope

pytestmark = pytest.mark.unit

EXP = datetime(2026, 3, 10, 9, 0, tzinfo=timezone.utc)


def claude(access: str, *, expires: datetime = EXP, **extra: object) -> str:
    return json.dumps({"claudeAiOauth": {"accessToken": access, "refreshToken": "r-" + access,
                                         "expiresAt": int(expires.timestamp() * 1000), "scopes": ["user:inference"],
                                         "subscriptionType": "max"}, **extra})


def _jwt(claims: dict) -> str:
    part = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"e30.{part}.sig"


def codex(access: str, account: str = "acct-1", **extra: object) -> str:
    return json.dumps({"auth_mode": "chatgpt", "OPENAI_API_KEY": None,
                       "tokens": {"id_token": "id-" + access, "access_token": _jwt({"exp": 1773133200, "a": access}),
                                  "refresh_token": "r-" + access, "account_id": account},
                       "last_refresh": "2026-03-10T00:00:00Z", **extra})


def test_the_keeper_names_no_login_format():
    """Before: `_graft`, `_mark` and `_same_account` in service/logins.py knew `claudeAiOauth`, `tokens` and
    the `agentbox` marker key."""
    for mod in (logins, loginpush, loginidentity, loginrefresh, loginadopt, loginscope):  # the keeper and its parts
        tree = ast.parse(Path(mod.__file__).read_text())
        strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        for word in ("claudeAiOauth", "accessToken", "tokens", "access_token", "last_refresh", MARKER_KEY):
            assert word not in strings, (mod.__name__, word)
        assert not hasattr(mod, "MARKER_KEY"), mod.__name__
    for cls in (logins.LoginKeeper, loginpush.LoginPusher, loginidentity.AccountIdentity, loginrefresh.LoginRefresher,
                loginadopt.LoginAdopter):
        assert not [n for n in ("_graft", "_mark", "_same_account") if hasattr(cls, n)], cls.__name__


def test_claude_graft_takes_only_the_box_tokens_and_expiry():
    ours = claude("old", **{MARKER_KEY: {"subscription": "ns/s"}, "other": 1})
    later = datetime(2026, 3, 10, 12, 0, tzinfo=timezone.utc)
    box = json.loads(claude("new", expires=later, **{MARKER_KEY: {"subscription": "ns/forged"}}))
    box["claudeAiOauth"]["scopes"] = ["everything"]
    box["claudeAiOauth"]["subscriptionType"] = "free"
    out = json.loads(login_file("anthropic").graft(ours, json.dumps(box)))
    assert out["claudeAiOauth"] == {**json.loads(ours)["claudeAiOauth"], "accessToken": "new", "refreshToken": "r-new",
                                    "expiresAt": int(later.timestamp() * 1000)}
    assert out[MARKER_KEY] == {"subscription": "ns/s"} and out["other"] == 1


def test_claude_mark_is_added_once_and_names_the_subscription():
    fmt = login_file("anthropic")
    marked = fmt.mark(claude("a"), "ns/s")
    assert json.loads(marked)[MARKER_KEY] == {"subscription": "ns/s"}
    assert fmt.mark(marked, "ns/s") is marked  # already marked: the text itself
    login = parse_login("anthropic", marked)
    assert fmt.same_account(marked, login, "ns/s") and not fmt.same_account(marked, login, "ns/other")
    assert not fmt.same_account(claude("a"), login, "ns/s")  # unmarked
    for junk in ("", "not json", "[1]", "[" * 100000):
        assert not fmt.same_account(junk, login, "ns/s")


def test_codex_graft_keeps_the_account_and_bounds_last_refresh():
    ours = codex("old", "acct-1", extra_field=True)
    box = json.loads(codex("new", "acct-forged"))
    box["last_refresh"] = "x" * 10000
    box["tokens"]["id_token"] = {"not": "a string"}
    out = json.loads(login_file("openai").graft(ours, json.dumps(box)))
    assert out["tokens"]["account_id"] == "acct-1" and out["tokens"]["refresh_token"] == "r-new"
    assert out["tokens"]["access_token"] == box["tokens"]["access_token"]
    assert out["tokens"]["id_token"] == "id-old"  # not a string in the box's file: ours kept
    assert len(out["last_refresh"]) == 64 and out["extra_field"] is True


def test_codex_has_no_marker_and_compares_the_account_id():
    fmt = login_file("openai")
    text = codex("a", "acct-1")
    assert fmt.mark(text, "ns/s") is text
    login = parse_login("openai", text)
    assert fmt.same_account(codex("b", "acct-1"), login, "ns/s")
    assert not fmt.same_account(codex("b", "acct-2"), login, "ns/s")
    assert not fmt.same_account("{}", login, "ns/s") and not fmt.same_account("", login, "ns/s")


def test_an_unknown_provider_is_named():
    with pytest.raises(UnknownProvider, match="'gemini'.*anthropic, openai"):
        login_file("gemini")
