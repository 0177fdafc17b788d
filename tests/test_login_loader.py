"""One login loader (issue 12 item 1): the login keeper reads no Secret and parses no box's login itself; the
Subscription's Secret is read once per reader pass (by the loader) and the keeper works on that read."""

from __future__ import annotations

import ast
import base64
from datetime import timedelta
from pathlib import Path

import pytest

from controller import constants as C
from controller.runtime import Runtime
from controller.service import loginadopt, loginidentity, loginpush, loginrefresh, loginscope
from controller.service import logins as logins_mod
from controller.service.loginload import load_box_login, parse_held_login
from controller.service.subscriptions import SubscriptionReader
from harness.memkube import MemKube as FakeKube

from harness.reader_world import NS, T0, claude_login, reader_runtime, subscription

pytestmark = pytest.mark.unit


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch) -> Runtime:
    return reader_runtime(monkeypatch)


async def test_a_reader_pass_reads_the_subscription_secret_once(rt: Runtime):
    """The keeper works on the loader's read: no second read of the same Secret in the same pass."""
    reader = SubscriptionReader(rt, NS, "shared", lambda *a: None)
    await reader.tick(subscription())
    assert rt.kube.secret_reads.count("login-shared") == 1  # type: ignore[attr-defined]
    stored = rt.kube.objects[(C.SUBSCRIPTION_PLURAL, NS, "shared")]["status"]  # type: ignore[attr-defined]
    assert stored["state"] == "Available" and stored["account"] == "acct-a"


KEEPER_MODULES = (logins_mod, loginpush, loginidentity, loginrefresh, loginadopt, loginscope)
"""The login keeper and its parts (`service/logins.py` composes the others)."""


@pytest.mark.parametrize("mod", KEEPER_MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_the_keeper_reads_and_parses_logins_only_through_the_loader(mod):
    tree = ast.parse(Path(mod.__file__).read_text())
    called = {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
              for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert "get_secret_value" not in called
    handled = {ast.unparse(h.type) for h in ast.walk(tree) if isinstance(h, ast.ExceptHandler) and h.type is not None}
    assert "InvalidLogin" not in handled, "a login that does not parse is the loader's verdict, not the keeper's"


async def test_box_login_loader_reasons_name_the_secret_never_the_value():
    kube = FakeKube()
    secret = claude_login("box-token-SECRET", T0 + timedelta(hours=1))
    assert (await load_box_login(kube, NS, "b1", "anthropic")).reason == C.R_SECRET_NOT_FOUND
    kube.secrets[(NS, "b1-credentials")] = {"other": "x"}
    missing = await load_box_login(kube, NS, "b1", "anthropic")
    assert missing.reason == C.R_SECRET_KEY_MISSING and "'b1-credentials'" in missing.message
    kube.secrets[(NS, "b1-credentials")] = {"credentials.json": '{"claudeAiOauth": {"accessToken": "SECRET-x"'}
    bad = await load_box_login(kube, NS, "b1", "anthropic")
    assert bad.reason == C.R_INVALID_LOGIN and "SECRET" not in bad.message and not bad.usable
    kube.secrets[(NS, "b1-credentials")] = {"credentials.json": secret}
    good = await load_box_login(kube, NS, "b1", "anthropic")
    assert good.usable and good.login is not None and good.login.access_token == "box-token-SECRET"
    assert kube.secret_reads == ["b1-credentials"] * 4


@pytest.mark.parametrize("text", [None, "", "[" * 100000, "null", '{"tokens": 5}', base64.b64encode(b"\xff").decode()])
def test_a_login_out_of_a_box_that_does_not_parse_is_none_never_an_exception(text):
    assert parse_held_login("anthropic", text) is None and parse_held_login("openai", text) is None
