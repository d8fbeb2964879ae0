"""``FailOpenMiddleware``: asks the guard about protected requests; passes the rest straight on.

Sync- and async-capable (``sync_capable = async_capable = True``): Django runs it natively in
both stacks, never through a thread or an event-loop adapter, and its ``process_view`` matches
the stack too. The async path sends only what blocks (reading a body, rendering a REJECT_VIEW
template) to a worker thread.

A request is protected by its view (``@protect``, FAILOPEN['PROTECTED_VIEWS']), judged in
``process_view`` from the view Django resolved: every route to that view is covered, whatever
its spelling (aliases, ``i18n_patterns``, translated routes, script prefixes). Or by its path
(PROTECTED_PATHS), judged in ``__call__``: place the middleware after any middleware that
rewrites ``request.path_info`` or ``request.method`` (a path-prefix stripper, a method
override), because the guard judges the path and method it sees and the URL resolver routes the
ones it gets later. ``/login`` is protected with ``/login/``, and ``/fr/login/`` with
``/login/``. A body that may carry the token is read at most once, up to
FAILOPEN_MAX_BODY_BYTES (413 over it), and stays readable by the view (``_body``), whatever
read ``request.POST`` first (see the ``_body`` module).

The system checks never run under gunicorn or uvicorn: the first request of the process logs
the PROTECTED_VIEWS names that no route carries (failopen.W009), once.
"""

# Django ships no type information: its names are Any here.
# mypy: disable-error-code="import-untyped"

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from asgiref.sync import async_to_sync, iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.urls import get_resolver
from django.utils.translation import get_language_from_path

from failopen.config import Config
from failopen.engine.guard import Decision
from failopen.web import SOLUTION_HEADER, client_address

from . import conf
from ._answers import body_too_large, finish_custom, rejection
from ._body import TooLarge, declared_length, may_carry_token, token_from_request_body
from .outage import route_policy, view_of
from .protection import action_of, any_action_marks, is_marked

__all__ = ["FailOpenMiddleware", "RequestDecision", "current_request"]

logger = logging.getLogger("failopen.django")

#: Where Django puts the fallback solution's header.
SOLUTION_META_KEY = "HTTP_" + SOLUTION_HEADER.upper().replace("-", "_")

#: The request this middleware is passing to the view, for what gets no request of its own: a
#: form field's ``clean`` (``forms.EnforcementTokenField``). A context variable, so each thread
#: and each task sees its own request, and asgiref carries it into a sync view's thread.
current_request: ContextVar[HttpRequest | None] = ContextVar("failopen_request", default=None)


class RequestDecision:
    """``request.failopen`` on a protected request: what the guard decided, and why."""

    __slots__ = ("decision",)

    def __init__(self, decision: Decision) -> None:
        self.decision = decision

    def __repr__(self) -> str:
        return f"RequestDecision({self.decision.outcome!r}, enforce={self.enforce})"

    @property
    def enforce(self) -> bool:
        """True when the token was checked (or, in shadow mode, would have been bypassed)."""
        return not self.decision.bypassed

    @property
    def bypassed(self) -> bool:
        """True when the request went through without a verified token (fail-open)."""
        return self.decision.bypassed

    @property
    def reason(self) -> str:
        """Why, in words (for logs; never shown to the client by failopen)."""
        return self.decision.reason

    @property
    def outcome(self) -> str:
        """The guard's outcome code, such as ``valid`` or ``bypassed_flag_off``."""
        return self.decision.outcome

    @property
    def allow(self) -> bool:
        """True when the request reaches the view."""
        return self.decision.allow

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``enforce`` plus the guard's decision fields."""
        return {"enforce": self.enforce, **self.decision.to_dict()}


class FailOpenMiddleware:
    """Validates enforcement tokens on protected routes, unless a confirmed outage says not to.

    Two ways a request is protected, each decided once: its path (PROTECTED_PATHS), judged in
    ``__call__`` before any view middleware; or its view (``protect``, PROTECTED_VIEWS), judged
    in ``process_view`` from the view Django resolved, whatever route led there.
    Non-protected requests get ``request.failopen = None`` and nothing else, but for
    :data:`current_request` while the view runs (a form field finds the request there).
    """

    sync_capable = True
    async_capable = True
    # Django adapts process_view to the handler's mode: a sync one under ASGI would run on the
    # thread-sensitive worker, one request at a time, verify call included. So it matches the
    # mode this instance runs in (set in __init__); Django only adapts it in a chain that
    # already mixes modes.
    process_view: Callable[..., Any]

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response
        self.async_mode = iscoroutinefunction(get_response)
        if self.async_mode:
            markcoroutinefunction(self)
            self.process_view = self._aprocess_view
        else:
            self.process_view = self._process_view

    def __repr__(self) -> str:
        return f"FailOpenMiddleware(async_mode={self.async_mode})"

    def __call__(self, request: HttpRequest) -> Any:
        if self.async_mode:
            return self.__acall__(request)
        settings = conf.loaded()
        request.failopen = None
        if not settings.views.reported:
            settings.views.report_unmatched()  # once: checks never run under gunicorn/uvicorn
        if request.method not in settings.unguarded_methods and (
                _is_protected(settings, request) or _big_form_to_protected_view(settings, request)):
            refused = self._judge(request, settings, None)
            if refused is not None:
                return refused
        mark = current_request.set(request)
        try:
            return self.get_response(request)
        finally:
            current_request.reset(mark)

    async def __acall__(self, request: HttpRequest) -> Any:
        """The async twin of ``__call__``: the same steps, awaiting the guard and the view."""
        settings = conf.loaded()
        request.failopen = None
        if not settings.views.reported:
            settings.views.report_unmatched()
        if request.method not in settings.unguarded_methods and (
                _is_protected(settings, request) or _big_form_to_protected_view(settings, request)):
            refused = await self._ajudge(request, settings, None)
            if refused is not None:
                return refused
        mark = current_request.set(request)
        try:
            return await self.get_response(request)
        finally:
            current_request.reset(mark)

    def _process_view(self, request: HttpRequest, view: Any, args: Any, kwargs: Any) -> Any:
        """Judge a request for a protected view that its path did not already judge."""
        if _admitted(request):
            return None  # judged by its path in __call__ (or a form field): once is enough
        settings = conf.loaded()
        if not _protects_view(settings, request, view):
            return None
        return self._judge(request, settings, view)

    async def _aprocess_view(self, request: HttpRequest, view: Any, args: Any,
                             kwargs: Any) -> Any:
        """The async twin of ``_process_view``."""
        if _admitted(request):
            return None
        settings = conf.loaded()
        if not _protects_view(settings, request, view):
            return None
        return await self._ajudge(request, settings, view)

    def _judge(self, request: HttpRequest, settings: conf.Loaded,
               view: Any) -> HttpResponseBase | None:
        """Ask the guard; None to go on to the view, else the answer that refuses."""
        if settings.config is None:
            decision = conf.unavailable()
        else:
            try:
                runtime, path = conf.runtime(), request.path_info
                # Under WSGI, once per process (issue 31, A10); Django's test client (its
                # FakePayload body) claims several processes for a test run's one.
                if runtime.per_worker.pending and type(request.META.get(
                        "wsgi.input")).__name__ != "FakePayload":
                    runtime.per_worker.server_says(request.META.get("wsgi.multiprocess"),
                                                   adapter="Django", how="wsgi.multiprocess")
                client = _client(request, settings.config)
                agent = request.META.get("HTTP_USER_AGENT", "")
                route, policy, solution = _outage(request, settings, view)
                # With enforcement off the token is never looked at: skip reading the body.
                bypass = runtime.bypass(path=path, client=client, user_agent=agent,
                                        policy=policy, route=route, solution=solution)
                if bypass is not None:
                    decision = bypass
                else:
                    token = _token_from_header(request, settings) or _token_from_body(
                        request, settings.config)
                    if isinstance(token, TooLarge):
                        return body_too_large()
                    if policy == "fallback" and solution is None:
                        solution = _solution_from_body(request, settings.config)
                    decision = runtime.decide(token, path=path, client=client, user_agent=agent,
                                              policy=policy, route=route, solution=solution,
                                              action=_action(request, view))
            except Exception:
                decision = _failed(settings)
        request.failopen = RequestDecision(decision)
        if decision.allow:
            return None
        view = settings.reject_view
        if view is not None:
            call = async_to_sync(view) if iscoroutinefunction(view) else view
            try:
                return finish_custom(call(request, decision), decision)
            except Exception:
                logger.exception("failopen REJECT_VIEW failed; answering with the default page")
        return rejection(request, decision)

    async def _ajudge(self, request: HttpRequest, settings: conf.Loaded,
                      view: Any) -> HttpResponseBase | None:
        """The async twin of ``_judge``: the verify call is awaited, blocking I/O is threaded."""
        if settings.config is None:
            decision = conf.unavailable()
        else:
            try:
                runtime, path = conf.runtime(), request.path_info
                client = _client(request, settings.config)
                agent = request.META.get("HTTP_USER_AGENT", "")
                route, policy, solution = _outage(request, settings, view)
                # Awaited: the fleet's Redis, where the outage policy asks it, off the loop.
                bypass = await runtime.abypass(path=path, client=client, user_agent=agent,
                                               policy=policy, route=route, solution=solution)
                if bypass is not None:
                    decision = bypass
                else:
                    # Reading the body may read a spooled file: not on the event loop.
                    token = _token_from_header(request, settings) or await _body_reader(
                        request, settings.config)
                    if isinstance(token, TooLarge):
                        return body_too_large()
                    if policy == "fallback" and solution is None:
                        solution = await sync_to_async(_solution_from_body,
                                                       thread_sensitive=False)(
                            request, settings.config)
                    decision = await runtime.adecide(token, path=path, client=client,
                                                      user_agent=agent, policy=policy,
                                                      route=route, solution=solution,
                                                      action=_action(request, view))
            except Exception:
                decision = _failed(settings)
        request.failopen = RequestDecision(decision)
        if decision.allow:
            return None
        view = settings.reject_view
        if view is not None:
            call = view if iscoroutinefunction(view) else sync_to_async(view)
            try:
                # A TemplateResponse renders templates (file I/O) here: on a worker thread.
                return await sync_to_async(finish_custom)(await call(request, decision),
                                                           decision)
            except Exception:
                logger.exception("failopen REJECT_VIEW failed; answering with the default page")
        return rejection(request, decision)


def _admitted(request: HttpRequest) -> bool:
    """True when an earlier decision of this request let it through. A refusal found here was
    not this middleware's (its own refusals end the request): a form field cleaned before the
    view was resolved (another middleware's ``__call__``) leaves one, and it must not pass for
    "judged already" and open a protected view that carries no field."""
    earlier = getattr(request, "failopen", None)
    return earlier is not None and bool(getattr(earlier, "allow", False))


def _outage(request: HttpRequest, settings: conf.Loaded,
            view: Any) -> tuple[str, str, str | None]:
    """``(route, policy, solution from the header)``: see :func:`.outage.route_policy`."""
    route, policy = route_policy(settings, request.path_info, view,
                                 getattr(request, "urlconf", None))
    return route, policy, request.META.get(SOLUTION_META_KEY) or None


def _action(request: HttpRequest, view: Any) -> str | None:
    """The action ``@protect(action=...)`` gave the view (resolved from the path when the
    request was judged by it, once any view has one); None: ``EXPECTED_ACTIONS`` decides."""
    if not any_action_marks():
        return None
    if view is None:
        view = view_of(request.path_info, getattr(request, "urlconf", None))
    return action_of(view) if view is not None else None


def _client(request: HttpRequest, config: Config) -> str:
    """The peer address, or behind FAILOPEN_TRUSTED_PROXIES the client they forwarded for."""
    peer = request.META.get("REMOTE_ADDR", "")
    trusted = config.trusted_networks
    if not trusted:
        return str(peer)
    return client_address(peer, request.META.get("HTTP_X_FORWARDED_FOR"), trusted)


def _solution_from_body(request: HttpRequest, config: Config) -> str | None:
    """A fallback answer in the body's ``altcha`` field, or the second vendor's own
    (FAILOPEN_FALLBACK_VENDOR), form or JSON, bounded as the token's search is; None when there
    is none."""
    found = token_from_request_body(request, config, field=config.fallback_token_field)
    return found if isinstance(found, str) else None


def _protects_view(settings: conf.Loaded, request: HttpRequest, view: Any) -> bool:
    """True when ``view`` is protected (``protect`` or PROTECTED_VIEWS) for this method."""
    method = request.method or ""
    if method in settings.unguarded_methods or not settings.protects_method(method):
        return False
    return is_marked(view) or settings.views.covers(view, getattr(request, "urlconf", None))


def _big_form_to_protected_view(settings: conf.Loaded, request: HttpRequest) -> bool:
    """True for a form over the body cap, without a header token, to a protected view.

    Judged before any view middleware: CsrfViewMiddleware's process_view parses the form (and
    spools its files to disk) before ours runs. Rare (large forms only), so the extra URL
    resolution costs the other requests nothing; a route it cannot resolve goes on as usual.
    """
    config = settings.config
    if (config is None or not settings.protects_method(request.method or "")
            or declared_length(request) <= config.max_body_bytes
            or not may_carry_token(request, forms_only=True)
            or _token_from_header(request, settings)):
        return False
    try:
        match = get_resolver(getattr(request, "urlconf", None)).resolve(request.path_info)
    except Exception:  # Resolver404 and anything a broken URLconf raises: Django answers it
        return False
    return _protects_view(settings, request, match.func)


def _is_protected(settings: conf.Loaded, request: HttpRequest) -> bool:
    """True when the guard must decide. ``path_info``: the path the URL resolver will route.

    Under ``i18n_patterns`` the view of ``/login/`` also answers ``/fr/login/`` (and, without
    ``prefix_default_language=False``, only there): a listed path is protected under every
    language prefix, or a prefix would be a way around the guard. Only ever adds protection.
    """
    method, path = request.method, request.path_info
    if settings.is_protected(method, path):
        return True
    end = path.find("/", 1)
    # The cheap test first (most requests are GETs, which stop at the method): only then ask
    # whether the first segment names one of LANGUAGES (always None without USE_I18N).
    return (end != -1 and settings.is_protected(method, path[end:])
            and _names_language(path))


def _names_language(path: str) -> bool:
    try:
        return get_language_from_path(path) is not None
    except Exception:  # LANGUAGES unusable: the path may be a language's view, so guard it
        logger.exception("failopen cannot read the language prefix; guarding %r", path)
        return True


def _failed(settings: conf.Loaded) -> Decision:
    logger.exception("failopen could not decide; refusing the request")
    assert settings.config is not None
    return conf.unavailable(settings.config.retry_after)


def _token_from_header(request: HttpRequest, settings: conf.Loaded) -> str | None:
    """The token from the configured header, if the request has one."""
    token = request.META.get(settings.token_meta_key)
    return token or None


# Looked up per call, here, so tests can watch it.
_token_from_body = token_from_request_body


async def _body_reader(request: HttpRequest, config: Config) -> str | None | TooLarge:
    """``_token_from_body`` on a worker thread (looked up per call, so tests can watch it)."""
    reader = sync_to_async(_token_from_body, thread_sensitive=False)
    return await reader(request, config)
