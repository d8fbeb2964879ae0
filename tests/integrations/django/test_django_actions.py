"""Django with reCAPTCHA v3: ``@protect(action=...)`` and ``EXPECTED_ACTIONS`` name the action a
view's tokens must carry; a token minted for another action, or below the minimum score, is
refused; the token is read from ``g-recaptcha-response``. The vendor is the test kit's reCAPTCHA
fake, served on loopback; the test client and the async client both."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import override_settings

from failopen.runtime import FailOpen
from failopen.testing import fake_verify_api
from failopen.testing.providers import CaptchaVerifyFake

FIELD = "g-recaptcha-response"


@pytest.fixture
def recaptcha() -> Iterator[CaptchaVerifyFake]:
    api = fake_verify_api("recaptcha")
    with api.serve():
        yield api


@pytest.fixture(autouse=True)
def _urls() -> Iterator[None]:
    # Autouse: entered before use_failopen's own override_settings and left after it (the
    # overrides must nest, or the URLconf outlives the test).
    with override_settings(ROOT_URLCONF="django_test_urls_actions"):
        yield


@pytest.fixture
def actions(use_failopen: Callable[..., FailOpen | None],
            recaptcha: CaptchaVerifyFake) -> CaptchaVerifyFake:
    runtime = use_failopen(
        VENDOR="recaptcha", VERIFY_URL=recaptcha.verify_url,
        PRIVATE_KEY=recaptcha.private_key, PUBLIC_KEY=recaptcha.public_key,
        PROTECTED_PATHS=["/signup/"], PROTECTED_VIEWS=["reset"],
        EXPECTED_ACTIONS={"reset": "password_reset"})
    assert runtime is not None
    return recaptcha


@pytest.fixture
def client(make_client: Callable[..., Any], client_kind: str) -> Any:
    """Django's test client, sync and async (LoopClient runs the async one from the test)."""
    return make_client()


def post(client: Any, path: str, token: str) -> tuple[int, str]:
    answer = client.post(path, {FIELD: token, "username": "ann"},
                         headers={"Accept": "application/json"})
    body = answer.json()
    outcome = body["failopen"]["outcome"] if answer.status_code == 200 else body["error"]["code"]
    return answer.status_code, outcome


@pytest.mark.parametrize(("path", "action"), [("/login/", "login"), ("/signup/", "signup"),
                                              ("/reset/", "password_reset")])
def test_a_token_for_the_view_s_action_passes_and_another_is_refused(
        actions: CaptchaVerifyFake, client: Any, path: str, action: str) -> None:
    assert post(client, path, actions.issue_token(score=0.9, action=action)) == (200, "valid")
    assert post(client, path, actions.issue_token(score=0.9, action="other")) == (
        403, "invalid_token")
    assert post(client, path, actions.issue_token(score=0.9)) == (403, "invalid_token")


def test_a_low_score_is_refused(actions: CaptchaVerifyFake, client: Any) -> None:
    assert post(client, "/login/", actions.issue_token(score=0.2, action="login")) == (
        403, "invalid_token")


def test_protect_refuses_an_action_no_vendor_mints() -> None:
    from failopen.integrations.django import protect

    with pytest.raises(ValueError, match="not an action name"):
        protect(action="log in")
