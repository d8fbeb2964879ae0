"""``{% load failopen %}{% failopen_script %}``: the browser snippet's script tag."""

# Django ships no type information: its names are Any here.
# mypy: disable-error-code="import-untyped, untyped-decorator"

from __future__ import annotations

import logging
from typing import Any

from django import template
from django.templatetags.static import static
from django.urls import reverse
from django.utils.safestring import mark_safe

from failopen.exceptions import ConfigError
from failopen.web import snippet_attributes, snippet_tag

from .. import conf
from ..outage import policy_of_path

__all__ = ["failopen_script", "register"]

logger = logging.getLogger("failopen.django")

register = template.Library()


@register.simple_tag(takes_context=True)
def failopen_script(context: Any, **options: Any) -> str:
    """``<script src=".../failopen/failopen.js" defer data-failopen-...>``, with the CSP nonce.

    The settings give the flag URL, public key, token field and vendor URL; the snippet's tuning
    options come as keywords: ``{% failopen_script form="#login" ready_timeout_ms=5000
    retries=3 retry_delay_ms=500 %}``. The nonce comes from ``request.csp_nonce`` (django-csp)
    when the template has a request, else from the context's ``csp_nonce`` (Django 6's CSP
    context processor).

    ``only_protected=True`` renders the tag only on a page whose own route is protected (its
    view, or its path): for a layout that protected and unprotected pages share, such as
    django-allauth's, where a form the snippet holds would otherwise wait for the vendor on a
    page that needs no token.
    """
    if options.pop("only_protected", False) and not _page_is_protected(context.get("request")):
        return ""
    try:
        config = conf.config()
    except ConfigError:
        # The page still renders; protected routes answer 503 and the checks name the setting.
        logger.error("failopen settings unusable; the snippet's script tag is left out")
        return ""
    try:
        flag_url, src = reverse("failopen:flag"), static("failopen/failopen.js")
    except Exception:
        # NoReverseMatch (the failopen URLs not included), or a manifest storage that has no
        # failopen/failopen.js (collectstatic without SnippetFinder): a page of the site must
        # not fail for the tag. The snippet missing means the browser is not told to skip the
        # challenge: the safe side.
        logger.exception("failopen_script: cannot build the script tag; it is left out")
        return ""
    try:
        attributes: dict[str, str] = snippet_attributes(config, flag_url=flag_url, **options)
    except (TypeError, ValueError) as exc:
        # A template typo: the snippet's own defaults are better than no snippet at all.
        logger.error("failopen_script: %s; the snippet's defaults apply", exc)
        attributes = snippet_attributes(config, flag_url=flag_url)
    if _elsewhere(src) and "data-failopen-solver-url" not in attributes:
        # Static files on a CDN: a Web Worker cannot start from another origin, so the fallback
        # solver comes from the site's own failopen URLs.
        try:
            attributes["data-failopen-solver-url"] = reverse("failopen:solver")
        except Exception:
            logger.exception("failopen_script: no same-origin URL for the fallback solver")
    # django-csp sets it on the request; Django 6's own CSP puts it in the template context.
    nonce = getattr(context.get("request"), "csp_nonce", None) or context.get("csp_nonce")
    if nonce:
        attributes["nonce"] = str(nonce)
    # Every value escaped by the renderer that Jinja's failopen_script() shares.
    rendered: str = mark_safe(snippet_tag(src, attributes))  # noqa: S308
    return rendered


def _page_is_protected(request: Any) -> bool:
    """True when a POST to the page's own route would need a token (what the flag endpoint
    says of it); True too when that cannot be told, since a protected page without the snippet
    can never send its form."""
    if request is None:
        return True
    try:
        return policy_of_path(request.path_info) is not None
    except Exception:
        # Not the path: a password-reset page carries its key in it.
        logger.exception("failopen_script: cannot tell whether this page is protected")
        return True


def _elsewhere(url: str) -> bool:
    """True when ``url`` names an origin (``https://cdn.example/...``, ``//cdn.example/...``)."""
    return url.startswith(("//", "http://", "https://"))
