"""``{% load failopen %}{% failopen_script %}``: the browser snippet's script tag."""

# Django ships no type information: its names are Any here.
# mypy: disable-error-code="import-untyped, untyped-decorator"

from __future__ import annotations

import logging
from typing import Any

from django import template
from django.forms.utils import flatatt
from django.templatetags.static import static
from django.urls import reverse
from django.utils.html import format_html

from failopen.exceptions import ConfigError
from failopen.web import snippet_attributes

from .. import conf

__all__ = ["failopen_script", "register"]

logger = logging.getLogger("failopen.django")

register = template.Library()


@register.simple_tag(takes_context=True)
def failopen_script(context: Any) -> str:
    """``<script src=".../failopen/failopen.js" defer data-failopen-...>``, with the CSP nonce.

    The nonce comes from ``request.csp_nonce`` (django-csp) when the template has a request.
    """
    try:
        config = conf.config()
    except ConfigError:
        # The page still renders; protected routes answer 503 and the checks name the setting.
        logger.error("failopen settings unusable; the snippet's script tag is left out")
        return ""
    attributes: dict[str, str] = snippet_attributes(config, flag_url=reverse("failopen:flag"))
    nonce = getattr(context.get("request"), "csp_nonce", None)
    if nonce:
        attributes["nonce"] = str(nonce)
    # flatatt escapes every value; src and defer first, as people write them.
    rendered: str = format_html('<script src="{}" defer{}></script>',
                                static("failopen/failopen.js"), flatatt(attributes))
    return rendered
