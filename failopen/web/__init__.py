"""What the adapters say over HTTP, free of any framework.

The Django, ASGI and WSGI adapters differ only in how they read a request and write a response;
the bodies, headers and rules live here so all of them answer the same way:
:mod:`~failopen.web.endpoints` (the flag and override endpoints, refusals, the snippet),
:mod:`~failopen.web.body_tokens` (the token inside a urlencoded, multipart or JSON body) and
:mod:`~failopen.web.refusals` (paced refusal logs). ``failopen.web`` is what adapters and sites
import (``from failopen.web import snippet_attributes``).
"""

from __future__ import annotations

from failopen.web.endpoints import (
    FLAG_HEADERS,
    MAX_OVERRIDE_BODY,
    REFUSAL_LOG_INTERVAL,
    SNIPPET_OPTIONS,
    SNIPPET_PATH,
    STORE_NOT_SHARED,
    RefusalLog,
    Snippet,
    admin_token_matches,
    bearer_token,
    describe_override,
    flag_payload,
    handle_override,
    load_snippet,
    prefers_json,
    rejection_headers,
    rejection_html,
    rejection_json,
    rejection_payload,
    snippet_attributes,
    store_is_shared,
    token_from_body,
    wants_confirm,
)

__all__ = [
    "FLAG_HEADERS",
    "MAX_OVERRIDE_BODY",
    "REFUSAL_LOG_INTERVAL",
    "RefusalLog",
    "SNIPPET_OPTIONS",
    "SNIPPET_PATH",
    "STORE_NOT_SHARED",
    "Snippet",
    "admin_token_matches",
    "bearer_token",
    "describe_override",
    "flag_payload",
    "handle_override",
    "load_snippet",
    "prefers_json",
    "rejection_headers",
    "rejection_html",
    "rejection_json",
    "rejection_payload",
    "snippet_attributes",
    "store_is_shared",
    "token_from_body",
    "wants_confirm",
]
