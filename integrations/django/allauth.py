"""django-allauth's entry points as URL names: ``FAILOPEN["PROTECTED_VIEWS"] = ALLAUTH_VIEWS``.

What is listed: every allauth endpoint where a client *starts* something a bot wants, on the
pages and in the headless API (browser and app clients): a log-in (a password to try), a
sign-up (an account, and a verification e-mail), a log-in by code or a password reset (an
e-mail to any address), a reauthentication (a password or a code to try with a stolen session).

What is not, and why (a site that wants more adds the names to its own list):

- the second step of a flow a listed step started (confirming a log-in, reauthentication or
  password-reset code, resending it, the second factor after a log-in, verifying the e-mail
  after a sign-up, setting the new password): allauth keeps it behind that first step, in the
  session, and bounds it itself (attempts per code, a resend quota, rate limits), so a second
  challenge would cost people more than it costs a bot;
- log-in and reauthentication by passkey: a signature from the person's device, nothing to
  guess and no message sent;
- signing in through a provider (its redirect, callback, or an app's provider token): the
  provider's own check applies, as it does to the account its callback may create;
- pages for a signed-in person's own account (e-mail addresses, password change, MFA set-up,
  sessions) and log-out.

Names follow allauth's URLconfs: the pages' URL names carry no namespace (``account_login``);
the headless API's carry the ``headless`` namespace that ``include("allauth.headless.urls")``
gives, then the client (``headless:browser:account:login``, ``headless:app:account:login``).
An install routes only what its settings enable (headless, MFA, log-in by code, passkey
sign-up, one headless client): failopen.W009 stays quiet about the names it does not route,
and speaks up when allauth routes one of these views under a name the list misses (see
:func:`allauth_urlpatterns`).
"""

# Django ships no type information: its names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import logging
from typing import Any

__all__ = ["ALLAUTH_VIEWS", "allauth_urlpatterns"]

logger = logging.getLogger("failopen.django")

# allauth's pages (allauth.urls): no namespace.
_PAGES = (
    "account_login",  # log-in by password: credential stuffing
    "account_signup",  # an account, and a verification e-mail to any address
    "account_signup_by_passkey",  # the same, by passkey (MFA_PASSKEY_SIGNUP_ENABLED)
    "account_request_login_code",  # a code e-mailed to any address (LOGIN_BY_CODE_ENABLED)
    "account_reset_password",  # a reset e-mail to any address; tells which addresses exist
    "account_reauthenticate",  # the password, tried with a stolen session
    "account_request_reauthentication_code",  # a code e-mailed, for a session (allauth 65.22+)
    "mfa_reauthenticate",  # a TOTP or recovery code, tried with a stolen session
    "socialaccount_signup",  # the account a provider sign-in asks to complete
)

# allauth's headless API (allauth.headless.urls), per client, under allauth's own namespaces:
# the same entry points as the pages, as JSON.
_HEADLESS = (
    "account:login",
    "account:signup",
    "account:request_login_code",
    "account:request_password_reset",
    "account:reauthenticate",
    "account:request_reauthentication_code",
    "mfa:reauthenticate",
    "mfa:signup_webauthn",  # POST starts a passkey sign-up (its PUT, the second step, is not)
    "socialaccount:provider_signup",
)

#: The URL names of django-allauth's entry points, for ``FAILOPEN["PROTECTED_VIEWS"]``.
ALLAUTH_VIEWS: tuple[str, ...] = (
    *_PAGES,
    *(f"headless:{client}:{name}" for client in ("browser", "app") for name in _HEADLESS),
)


def allauth_urlpatterns() -> list[Any]:
    """allauth's URLconfs as its documentation includes them, built with this install's
    settings: what allauth routes here, whatever the site's URLconf calls it.

    allauth decides at import which routes exist (headless, MFA, log-in by code, the clients),
    so a name of :data:`ALLAUTH_VIEWS` that this does not route is a feature the site does not
    use, not a typo. Empty without allauth.
    """
    from django.apps import apps
    from django.urls import include, path

    found = []
    for app, module, prefix in (("allauth.account", "allauth.urls", "accounts/"),
                                ("allauth.headless", "allauth.headless.urls", "_allauth/")):
        if not apps.is_installed(app):
            continue
        try:
            found.append(path(prefix, include(module)))
        except Exception:  # allauth's URLconf does not load: the site's does not either
            logger.debug("failopen cannot read %s", module, exc_info=True)
    return found
