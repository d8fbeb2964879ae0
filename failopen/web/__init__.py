"""What the adapters say over HTTP, free of any framework.

The Django, ASGI and WSGI adapters differ only in how they read a request and write a response;
the bodies, headers and rules live here so all of them answer the same way:
:mod:`~failopen.web.flag_endpoint`, :mod:`~failopen.web.rejections`,
:mod:`~failopen.web.override_endpoint` (with :mod:`~failopen.web.refusals`, its paced log),
:mod:`~failopen.web.snippet`, and :mod:`~failopen.web.body_tokens` (the token inside a
urlencoded, multipart or JSON body). ``failopen.web`` is what adapters and sites import
(``from failopen.web import snippet_attributes``).
"""

from __future__ import annotations

from failopen.web.body_tokens import token_from_body
from failopen.web.client_address import client_address
from failopen.web.flag_endpoint import (
    FLAG_HEADERS,
    challenge_answer,
    fallback_challenge,
    flag_payload,
    route_action,
    wants_confirm,
)
from failopen.web.override_endpoint import (
    MAX_OVERRIDE_BODY,
    STORE_NOT_SHARED,
    admin_token_matches,
    bearer_token,
    describe_override,
    handle_override,
    store_is_shared,
)
from failopen.web.refusals import REFUSAL_LOG_INTERVAL, RefusalLog
from failopen.web.rejections import (
    prefers_json,
    rejection_headers,
    rejection_html,
    rejection_json,
    rejection_payload,
    sealed_page_headers,
)
from failopen.web.route_policies import (
    SOLUTION_FIELD,
    SOLUTION_HEADER,
    RoutePolicies,
    asked_paths,
)
from failopen.web.snippet import (
    COMPANION_FILES,
    SNIPPET_OPTIONS,
    SNIPPET_PATH,
    SOLVER_PATH,
    Snippet,
    adapter_file,
    load_snippet,
    snippet_attributes,
    snippet_tag,
)

__all__ = [
    "SOLUTION_FIELD",
    "SOLUTION_HEADER",
    "RoutePolicies",
    "COMPANION_FILES",
    "adapter_file",
    "asked_paths",
    "challenge_answer",
    "client_address",
    "FLAG_HEADERS",
    "MAX_OVERRIDE_BODY",
    "REFUSAL_LOG_INTERVAL",
    "RefusalLog",
    "SNIPPET_OPTIONS",
    "SNIPPET_PATH",
    "SOLVER_PATH",
    "STORE_NOT_SHARED",
    "Snippet",
    "admin_token_matches",
    "bearer_token",
    "describe_override",
    "fallback_challenge",
    "flag_payload",
    "route_action",
    "handle_override",
    "load_snippet",
    "prefers_json",
    "rejection_headers",
    "rejection_html",
    "rejection_json",
    "rejection_payload",
    "sealed_page_headers",
    "snippet_attributes",
    "snippet_tag",
    "store_is_shared",
    "token_from_body",
    "wants_confirm",
]
