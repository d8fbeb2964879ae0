"""The flag endpoint (``GET flag``, ``?confirm=1``) and the optional override endpoint."""

# Django ships no type information: its names are Any here.
# mypy: disable-error-code="import-untyped, untyped-decorator"
# mypy: allow-subclassing-any

from __future__ import annotations

import json
import logging
from typing import Any

from django.core.handlers.wsgi import get_script_name
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from failopen.secret import Secret
from failopen.web import (
    FLAG_HEADERS,
    MAX_OVERRIDE_BODY,
    SOLVER_PATH,
    RefusalLog,
    admin_token_matches,
    asked_paths,
    bearer_token,
    challenge_answer,
    fallback_challenge,
    flag_payload,
    handle_override,
    load_snippet,
    route_action,
    wants_confirm,
)

from .._shared import fleet_page
from . import conf
from .outage import route_of_path

__all__ = ["challenge", "flag", "override", "solver"]

logger = logging.getLogger("failopen.django")

# A flood of wrong admin tokens is one log line per interval, not one per request.
_refusals = RefusalLog(logger)
_UNAVAILABLE = {"error": {"code": "unavailable", "message": "failopen is not available"}}
_FORBIDDEN = {"error": {"code": "forbidden", "message": "not allowed"}}
_NOT_FOUND = {"error": {"code": "not_found", "message": "not found"}}


def _json(status: int, data: dict[str, Any]) -> HttpResponse:
    response = HttpResponse(json.dumps(data), status=status)
    for name, value in FLAG_HEADERS:
        response[name] = value
    return response


def flag(request: HttpRequest) -> HttpResponse:
    """``{"enforce", "source", "reason", "since", "stale", ...}``, never cached.

    ``?confirm=1`` first runs the single-flight, cached outage check: it can only turn enforcement
    off when the status page confirms an outage, whoever asks and however often.
    """
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    try:
        runtime = conf.runtime()
        if wants_confirm(request.GET.get("confirm")):
            state = runtime.confirm()
        else:
            runtime.ensure_started()
            state = runtime.state
        found = route_of_path(_path_info_of(request))
        return _json(200, flag_payload(state, mode=runtime.config.mode, probe=runtime.probe,
                                       outage_policy=found[1] if found else None,
                                       poll=runtime.watcher,
                                       challenge=fallback_challenge(runtime.config),
                                       action=route_action(runtime.config, *found[::2])
                                       if found else None))
    except Exception:
        logger.exception("failopen flag endpoint failed")
        # The snippet reads any error as "enforce": the safe side.
        return _json(503, _UNAVAILABLE)


def _path_info_of(request: HttpRequest) -> str | None:
    """The ``path_info`` a form posting to the flag's ``?path=`` arrives with. That is the
    form's action as the browser reads it (the script prefix in front, non-ASCII
    percent-encoded); the middleware judges a request's ``path_info`` (decoded, no prefix)."""
    try:
        # Django's own reading, under WSGI and ASGI alike: FORCE_SCRIPT_NAME, else SCRIPT_NAME
        # (or root_path): what reverse() and {% url %} put in front of every form's action.
        prefix = get_script_name(request.META)
    except UnicodeError:  # a server's SCRIPT_NAME that is not UTF-8: as the server gave it
        prefix = str(request.META.get("SCRIPT_NAME") or "")
    paths = asked_paths(request.GET.get("path"), prefix.rstrip("/"))
    return paths[1] if paths is not None else None


def challenge(request: HttpRequest) -> HttpResponse:
    """``GET <prefix>/challenge``: a fresh fallback challenge while enforcement is off (409
    ``enforcing`` while it is on; 404 when no route's outage policy is ``fallback``)."""
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    try:
        runtime = conf.runtime()
        runtime.ensure_started()
        return _json(*challenge_answer(runtime.state, runtime.challenges,
                                       mode=runtime.config.mode))
    except Exception:
        logger.exception("failopen challenge endpoint failed")
        return _json(503, _UNAVAILABLE)


def solver(request: HttpRequest) -> HttpResponse:
    """``GET <prefix>/failopen-solver.js``: the fallback solver, from the site's own origin.

    A Web Worker must come from the page's origin, and a site whose static files are on a CDN
    serves failopen-solver.js from another one: ``{% failopen_script %}`` then points the snippet
    here. Cached like a static file, revalidated by its ETag.
    """
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    found = load_snippet(SOLVER_PATH)
    if found is None:
        return _json(404, _NOT_FOUND)
    same = request.headers.get("If-None-Match", "") in (found.etag, f"W/{found.etag}")
    response = HttpResponse(b"" if same else found.body, status=304 if same else 200,
                            content_type="text/javascript; charset=utf-8")
    response["ETag"], response["Cache-Control"] = found.etag, "public, max-age=86400"
    return response


class _CsrfCheck(CsrfViewMiddleware):
    """Django's own CSRF check, returning the failure reason instead of a response."""

    def _reject(self, request: HttpRequest, reason: str) -> str:
        return reason


def _csrf_failure(request: HttpRequest) -> str | None:
    check = _CsrfCheck(lambda request: None)
    check.process_request(request)
    failure: str | None = check.process_view(request, None, (), {})
    return failure


def _actor(request: HttpRequest, admin_token: Secret | None) -> str | None:
    """Who may override: the admin token (no CSRF: no cookie involved), or staff with CSRF."""
    given = bearer_token(request.META.get("HTTP_AUTHORIZATION"))
    if given is not None:
        if admin_token_matches(given, admin_token):
            return "admin-token"
        _refusals.refused("wrong admin token", request.META.get("REMOTE_ADDR", ""))
        return None
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or not user.is_staff or not user.is_active:
        return None
    reason = _csrf_failure(request)
    if reason is not None:
        logger.warning("failopen override refused: CSRF check failed (%s)", reason)
        return None
    return f"staff:{user.get_username()}"


@csrf_exempt  # checked in _actor for session auth only: a bearer token is not ambient authority
def override(request: HttpRequest) -> HttpResponse:
    """``POST {"enforce": false|true|null, "ttl": seconds, "reason": "..."}``; 404 when off."""
    try:
        config = conf.config()
    except Exception:
        logger.exception("failopen override endpoint: settings unusable")
        return _json(503, _UNAVAILABLE)
    if not config.override_endpoint:
        return _json(404, _NOT_FOUND)
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    try:
        actor = _actor(request, config.admin_token)
    except Exception:
        # The session or user table unreachable, a form over DATA_UPLOAD_MAX_MEMORY_SIZE read
        # by the CSRF check: nobody was authenticated, so this is a refusal, never a 500.
        logger.exception("failopen override refused: could not authenticate the request")
        actor = None
    if actor is None:
        return _json(403, _FORBIDDEN)
    try:
        runtime = conf.runtime()
        body = request.read(MAX_OVERRIDE_BODY + 1)
        user = getattr(request, "user", None)
        set_by = actor if actor == "admin-token" or user is None else f"django:{user.pk}"
        status, data = handle_override(runtime.flag, body, actor=actor, store=runtime.store,
                                       mode=config.mode, set_by=set_by, page=fleet_page(runtime))
    except Exception:
        logger.exception("failopen override endpoint failed")
        return _json(503, _UNAVAILABLE)
    return _json(status, data)
