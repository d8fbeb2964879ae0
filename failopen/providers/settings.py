"""The vendor's settings, checked together: ``FAILOPEN_VENDOR`` and what its adapter presets.

For the spec's vendor (the default) nothing is preset and nothing changes. For another vendor,
each setting left unset takes the vendor's own value: ``FAILOPEN_VERIFY_URL`` its verify endpoint
(once ``FAILOPEN_PRIVATE_KEY`` is set), ``FAILOPEN_TOKEN_FIELD`` its widget's field,
``FAILOPEN_STATUS_URL`` and ``FAILOPEN_GLOBAL_COMPONENT`` its status page and the component that
stands for its captcha (where it has one a machine can read). A setting given always wins.

A preset is kept as a :class:`~failopen._internal.defaults.DefaultText`, so a Config copied with
another vendor (``Config.replace``) takes that vendor's presets instead of keeping the first's.
"""

from __future__ import annotations

import re
from typing import Any

from failopen._internal.defaults import DefaultText
from failopen._internal.route_pairs import route_pairs
from failopen.exceptions import ConfigError
from failopen.providers.base import Provider
from failopen.providers.registry import PROVIDERS, provider_named

__all__ = ["action_routes", "browser_presets", "check_action", "vendor_presets"]

# reCAPTCHA's rule for action names ("alphanumeric characters, slashes, and underscores"), which
# Turnstile's (alphanumeric, _ and -, up to 32) nearly matches: the strictest common form.
_SETTING = "FAILOPEN_EXPECTED_ACTIONS"
_ACTION = re.compile(r"[A-Za-z0-9/_-]{1,100}")


def vendor_presets(*, vendor: Any, verify_url: str | None, private_key: bool,
                   public_key: str | None, token_field: str, status_url: str | None,
                   global_component: str | None, evidence: frozenset[str],
                   vendor_url: str | None = None, widget: str | None = None) -> dict[str, Any]:
    """The fields the vendor presets (only those it changes), after checking what it needs."""
    provider = provider_named(vendor)
    found: dict[str, Any] = browser_presets(provider, vendor_url=vendor_url, widget=widget)
    if isinstance(token_field, DefaultText) and token_field != provider.token_field:
        found["token_field"] = DefaultText(provider.token_field)
    if isinstance(verify_url, DefaultText):  # another vendor's preset: not given
        found["verify_url"] = verify_url = None
    if isinstance(status_url, DefaultText):
        found["status_url"] = status_url = None
    if isinstance(global_component, DefaultText):
        found["global_component"] = global_component = None
    if verify_url is None and private_key and provider.verify_url is not None:
        found["verify_url"] = verify_url = DefaultText(provider.verify_url)
    if verify_url is not None and provider.needs_public_key and not public_key:
        raise ConfigError(
            f"FAILOPEN_PUBLIC_KEY: required with FAILOPEN_VENDOR={provider.name} (the site key "
            f"goes with every {provider.title} verify call)")
    if verify_url is not None:
        provider.check_verify_url(verify_url)
    preset = provider.status
    if preset is not None and "status" in evidence:
        if status_url is None:
            found["status_url"] = DefaultText(preset.url)
        if global_component is None:
            found["global_component"] = DefaultText(preset.component)
    return found


def browser_presets(provider: Provider, *, vendor_url: str | None,
                    widget: str | None) -> dict[str, Any]:
    """The browser half's presets: ``FAILOPEN_VENDOR_URL`` the vendor's script origin and
    ``FAILOPEN_WIDGET`` its first mode, each where left unset; ConfigError for a mode its
    adapter does not render."""
    found: dict[str, Any] = {}
    if vendor_url is None or isinstance(vendor_url, DefaultText):
        origin = provider.script_origin
        found["vendor_url"] = DefaultText(origin) if origin is not None else None
    if widget is None or isinstance(widget, DefaultText):
        found["widget"] = DefaultText(provider.widgets[0]) if provider.widgets else None
    elif not provider.widgets:
        raise ConfigError(f"FAILOPEN_WIDGET: {provider.title}'s script has no widget modes; "
                          "remove it")
    elif widget not in provider.widgets:
        raise ConfigError(f"FAILOPEN_WIDGET: {widget!r} is not a {provider.title} widget mode; "
                          f"use one of: {', '.join(provider.widgets)}")
    return found


def check_action(action: Any) -> str:
    """``action`` when a vendor could mint a token for it; ValueError otherwise."""
    if not isinstance(action, str) or not _ACTION.fullmatch(action):
        raise ValueError(f"{action!r} is not an action name: use letters, digits, /, _ and - "
                         "(as the widget was given it)")
    return action


def _action(route: str, action: Any) -> str:
    try:
        return check_action(action)
    except ValueError as exc:
        raise ValueError(f"{exc} (for {route!r})") from None


def action_routes(value: Any, *, paths: tuple[str, ...], views: tuple[str, ...],
                  provider: Provider) -> tuple[tuple[str, str], ...]:
    """``ROUTE=ACTION`` pairs (FAILOPEN_EXPECTED_ACTIONS) from a comma-separated string, a
    mapping or pairs; ConfigError for an item without ``=``, an action no vendor mints, a route
    given twice, a route nothing protects, or any action for a vendor whose answers name none."""
    try:
        pairs = route_pairs(value, what="action", whats="actions", check=_action,
                            example="/login=login,/signup=signup")
    except ValueError as exc:
        raise ConfigError(f"{_SETTING}: {exc}") from None
    if pairs and not provider.checks_action:
        # Ignored, the routes would take any token; refused, every token: neither is asked.
        checking = ", ".join(p.title for p in PROVIDERS.values() if p.checks_action)
        raise ConfigError(f"{_SETTING}: {provider.title}'s answers name no action, so none can be "
                          f"checked; remove it (these vendors' can: {checking})")
    protected = set(paths) | set(views)
    for route, _action_name in pairs:
        if route not in protected:
            raise ConfigError(
                f"{_SETTING}: {route!r} is not a protected route; spell each route as in "
                f"FAILOPEN_PROTECTED_PATHS or FAILOPEN_PROTECTED_VIEWS "
                f"({', '.join(sorted(protected)) or 'both empty'})")
    return pairs
