"""Pure WSGI middleware: guards protected routes and serves failopen's own routes.

    from failopen.integrations.wsgi import FailOpenMiddleware
    app.wsgi_app = FailOpenMiddleware(app.wsgi_app)            # Flask; FAILOPEN_* variables
    application = FailOpenMiddleware(application, config=failopen.Config(...))

Per request, in this order::

    <prefix>/flag, <prefix>/failopen.js, <prefix>/failopen-solver.js, <prefix>/failopen-<vendor>.js,
    <prefix>/override ........................................ answered here (override: only with
                                                               an admin token configured; wrong
                                                               tokens logged one line a minute)
    protected method + path (any case of the method; the path with or without SCRIPT_NAME, and
    every spelling Config.is_protected covers)
                                                               token -> guard -> 403 / 503 / 413,
                                                               or the app, with the Decision in
                                                               environ["failopen.decision"] (flag
                                                               off: the app, body left unread)
    anything else ............................................ the app, environ untouched

The token comes from the header, else from a urlencoded, multipart or JSON body read within
FAILOPEN_MAX_BODY_BYTES and replayed to the app. Refusals are JSON for API clients and a small
HTML page for browsers. Built around a Django application it refuses to start: Django's own
middleware decides from the resolved view. The watcher starts on the first guarded request or
flag request of each process (gunicorn ``--preload`` workers included). The decision lives in
``failopen.engine.guard`` and every wire format in ``failopen.web``: this module only translates
WSGI.

A site's own refusal page instead: ``reject=`` (``_wsgi_reject``).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import parse_qsl

from failopen import web
from failopen.config import Config
from failopen.engine.guard import Decision, fail_closed
from failopen.runtime import FailOpen

from . import _wsgi_body as raw
from ._shared import (
    adapter_runtime,
    adapter_snippet,
    check_prefix,
    fleet_page,
    report_misconfiguration,
    unguarded_methods,
)
from ._wsgi_reject import Reject, site_page

__all__ = ["FailOpenMiddleware"]

logger = logging.getLogger("failopen.wsgi")

_Route = Callable[["raw.Environ"], "raw.Response"]


def _static(environ: raw.Environ, etag: str, ok: raw.Response,
            not_modified: raw.Response) -> raw.Response:
    """A file of the snippet: 200, or 304 when the browser's copy is current."""
    if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
        return raw.method_not_allowed("GET, HEAD")
    match = environ.get("HTTP_IF_NONE_MATCH")
    if etag and match is not None and raw.etag_listed(str(match), etag):
        return not_modified
    return ok


# Where a WSGI server puts the fallback solution's header: HTTP_ + upper case, "-" as "_".
SOLUTION_KEY = "HTTP_" + web.SOLUTION_HEADER.upper().replace("-", "_")

class FailOpenMiddleware:
    """failopen around any WSGI app (Flask, Bottle, Pyramid); Django has its own middleware."""

    def __init__(
        self,
        app: raw.WSGIApp,
        *,
        config: Config | None = None,
        runtime: FailOpen | None = None,
        prefix: str = "/failopen",
        snippet_path: Path | None = None,
        reject: Reject | None = None,
    ) -> None:
        self._page = site_page(reject)  # first: a TypeError here leaves no watcher behind
        runtime = adapter_runtime(app, config=config, runtime=runtime, kind="WSGI")
        self.app = app
        self.runtime = runtime
        self.config = config = runtime.config
        self.prefix = check_prefix(prefix)
        self._is_protected = config.is_protected  # any method case, HEAD with GET, path spellings
        # Where a WSGI server puts the header: HTTP_ + upper case, "-" as "_".
        self._token_key = "HTTP_" + config.token_header.strip().upper().replace("-", "_")
        self._trusted = config.trusted_networks  # FAILOPEN_TRUSTED_PROXIES
        self._internal_error = fail_closed("failopen internal error",
                                           retry_after=config.retry_after)
        self._routes: dict[str, _Route] = {prefix + "/flag": self._flag,
                                           prefix + "/challenge": self._challenge,
                                           prefix + "/failopen.js": self._snippet}
        # The snippet's other files, always the package's: the solver (it answers the
        # package's challenge) and the vendors' adapters.
        for name, path in web.COMPANION_FILES.items():
            companion = web.load_snippet(path)
            self._routes[prefix + "/" + name] = functools.partial(
                self._companion, companion.etag if companion is not None else "",
                *raw.snippet_responses(companion))
        # What each protected route does during an outage; with every route open and no
        # outage rate limit, a request needs no route at all (the common, cheapest case).
        self._policies = web.RoutePolicies.from_config(config)
        self._plain = self._policies.all_open and runtime.guard.gate.rate is None
        if config.admin_token:  # otherwise the route does not exist: the app answers
            self._routes[prefix + "/override"] = self._override
        # A method no path is protected for (GET, when only POST is): no path to read or decode.
        self._unguarded = unguarded_methods(config, prefix)
        self._refusals = web.RefusalLog(logger, clock=runtime.clock)
        self._store_shared = web.store_is_shared(runtime.store)
        self._store_not_shared = raw.json_response(409, web.STORE_NOT_SHARED)
        self._per_worker = runtime.per_worker  # its server's word, heard on the first request
        report_misconfiguration(logger, runtime, prefix + "/override" in self._routes, prefix,
                                kind="WSGI")
        snippet = adapter_snippet(logger, snippet_path, prefix)
        self._etag = snippet.etag if snippet is not None else ""
        self._snippet_200, self._snippet_304 = raw.snippet_responses(snippet)

    def __repr__(self) -> str:
        return f"FailOpenMiddleware(app={self.app!r}, prefix={self.prefix!r})"

    def __call__(self, environ: raw.Environ, start_response: raw.StartResponse) -> Iterable[bytes]:
        """Handle one WSGI request."""
        if self._per_worker.pending:  # once per process: does the server run several workers?
            self._per_worker.server_says(environ.get("wsgi.multiprocess"), adapter="WSGI",
                                         how="wsgi.multiprocess")
        try:
            # The fast path: a method guarded nowhere, mounted at the root (no SCRIPT_NAME) and
            # not one of our routes. A raw PATH_INFO that is not ASCII decodes to text that is
            # not either, so it cannot be an (ASCII) route's. Anything else: the full check.
            # (Subscripts: cheaper than .get; a missing key takes the full check.)
            unguarded = (environ["REQUEST_METHOD"] in self._unguarded
                         and not environ.get("SCRIPT_NAME")
                         and environ["PATH_INFO"] not in self._routes)
        except Exception:  # an odd environ (no PATH_INFO, an unhashable value): the full check
            unguarded = False
        if unguarded:
            return self.app(environ, start_response)
        try:
            other = raw.request_path(environ, "PATH_INFO")  # what the app routes on
            # Mounted at the root (no SCRIPT_NAME) both spellings are one: looked up once.
            path = raw.request_path(environ, "SCRIPT_NAME") + other \
                if environ.get("SCRIPT_NAME") else other
            route = self._routes.get(path) if path is other \
                else self._routes.get(path) or self._routes.get(other)
            method = str(environ.get("REQUEST_METHOD") or "GET")
            guarded = route is None and (self._is_protected(method, path) or (
                other != path and self._is_protected(method, other)))
        except Exception:
            logger.exception("failopen failed reading a request; refusing it")
            return raw.rejection(self._internal_error, as_json=True).send(start_response)
        if route is not None:
            return self._answer(route, environ, start_response)
        if guarded:
            return self._guarded(environ, start_response, path)
        return self.app(environ, start_response)

    # --- protected routes -------------------------------------------------------------------

    def _guarded(
        self, environ: raw.Environ, start_response: raw.StartResponse, path: str
    ) -> Iterable[bytes]:
        try:
            outcome = self._decide(environ, path)
        except Exception:
            # A bug in failopen must neither reach the server nor open the gate.
            logger.exception("failopen failed on a protected route; refusing the request")
            outcome = self._internal_error
        if type(outcome) is Decision and outcome.allow:
            # Outside the try: the app's own exceptions reach the server unchanged.
            return self.app(environ, start_response)
        # Refused: how to say so is worked out only now (an admitted request never needs it).
        head = str(environ.get("REQUEST_METHOD", "")).upper() == "HEAD"
        if isinstance(outcome, raw.Response):
            return outcome.send(start_response, head=head)
        page = self._page.response(environ, outcome) if self._page is not None else None
        if page is not None:
            return page.send(start_response, head=head)
        try:
            as_json = web.prefers_json(environ.get("HTTP_ACCEPT"), environ.get("CONTENT_TYPE"))
        except Exception:
            logger.exception("failopen failed on a protected route; refusing the request")
            as_json, outcome = True, self._internal_error
        return raw.rejection(outcome, as_json=as_json).send(start_response, head=head)

    def _decide(self, environ: raw.Environ, path: str) -> Decision | raw.Response:
        address = str(environ.get("REMOTE_ADDR") or "")
        if self._trusted:  # behind our own proxies: the client they forwarded for
            address = web.client_address(address, environ.get("HTTP_X_FORWARDED_FOR"),
                                         self._trusted)
        # Enforcement off: nobody looks at the token, so the body is neither capped nor parsed.
        agent = str(environ.get("HTTP_USER_AGENT") or "")
        route, policy, solution = "", "open", None
        if not self._plain:
            found = self._policies.for_path(path, raw.request_path(environ, "PATH_INFO"))
            route, policy = found if found is not None else (path, self._policies.default)
            solution = environ.get(SOLUTION_KEY) or None
        decision = self.runtime.bypass(path=path, client=address, user_agent=agent,
                                       policy=policy, route=route, solution=solution)
        if decision is None:
            token = environ.get(self._token_key) or None
            content_type = environ.get("CONTENT_TYPE")
            wants_solution = policy == "fallback" and solution is None
            if (not token or wants_solution) and raw.body_may_carry_token(content_type):
                body = raw.read_body(environ, self.config.max_body_bytes)
                if body == raw.TOO_LARGE:
                    return raw.BODY_TOO_LARGE
                if body == raw.DISCONNECTED:
                    return raw.BODY_ENDED_EARLY
                if isinstance(body, bytes):
                    token = token or web.token_from_body(content_type, body,
                                                         self.config.token_field)
                    if wants_solution:
                        solution = web.token_from_body(  # ALTCHA's, or the 2nd vendor's
                            content_type, body, self.config.fallback_token_field)
                    raw.replay(environ, body)
            decision = self.runtime.decide(token, path=path, client=address, user_agent=agent,
                                           policy=policy, route=route, solution=solution)
        environ["failopen.decision"] = decision
        return decision

    # --- failopen's own routes --------------------------------------------------------------

    def _answer(
        self, route: _Route, environ: raw.Environ, start_response: raw.StartResponse
    ) -> Iterable[bytes]:
        try:
            response = route(environ)
        except Exception:
            logger.exception("failopen route %s failed", environ.get("PATH_INFO"))
            response = raw.rejection(self._internal_error, as_json=True)
        head = str(environ.get("REQUEST_METHOD", "")).upper() == "HEAD"
        return response.send(start_response, head=head)

    def _flag(self, environ: raw.Environ) -> raw.Response:
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            return raw.method_not_allowed("GET, HEAD")
        self.runtime.ensure_started()
        query = parse_qsl(str(environ.get("QUERY_STRING") or ""), keep_blank_values=True)
        confirm = next((value for name, value in query if name == "confirm"), None)
        # confirm never turns enforcement off by itself: only a confirmed outage does.
        state = self.runtime.confirm() if web.wants_confirm(confirm) else self.runtime.state
        asked = next((value for name, value in query if name == "path"), None)
        # Asked with the form's action as the browser reads it: the mount prefix in front.
        found = self._policies.for_asked(asked, raw.request_path(environ, "SCRIPT_NAME"))
        payload = web.flag_payload(state, mode=self.config.mode, probe=self.runtime.probe,
                                   outage_policy=found[1] if found is not None else None,
                                   poll=self.runtime.watcher,
                                   challenge=web.fallback_challenge(self.config),
                                   action=web.route_action(self.config,
                                                           found[0] if found else None))
        return raw.raw_response(200, web.FLAG_HEADERS, json.dumps(payload).encode())

    def _challenge(self, environ: raw.Environ) -> raw.Response:
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            return raw.method_not_allowed("GET, HEAD")
        self.runtime.ensure_started()
        status, payload = web.challenge_answer(self.runtime.state, self.runtime.challenges,
                                               mode=self.config.mode)
        return raw.raw_response(status, web.FLAG_HEADERS, json.dumps(payload).encode())

    def _snippet(self, environ: raw.Environ) -> raw.Response:
        return _static(environ, self._etag, self._snippet_200, self._snippet_304)

    def _companion(self, etag: str, fresh: raw.Response, unchanged: raw.Response,
                   environ: raw.Environ) -> raw.Response:
        return _static(environ, etag, fresh, unchanged)

    def _override(self, environ: raw.Environ) -> raw.Response:
        if environ.get("REQUEST_METHOD") != "POST":
            return raw.method_not_allowed("POST")
        # Browsers never attach a bearer token by themselves, so this route needs no CSRF check.
        given = web.bearer_token(environ.get("HTTP_AUTHORIZATION"))
        if given is None:
            return raw.UNAUTHORIZED
        if not web.admin_token_matches(given, self.config.admin_token):
            self._refusals.refused("wrong admin token", str(environ.get("REMOTE_ADDR") or ""))
            return raw.FORBIDDEN
        if not self._store_shared:  # before the body: nothing in it can change the answer
            return self._store_not_shared
        body = raw.read_body(environ, web.MAX_OVERRIDE_BODY)
        if body == raw.TOO_LARGE:
            return raw.BODY_TOO_LARGE
        if body == raw.DISCONNECTED:
            return raw.BODY_ENDED_EARLY
        status, payload = web.handle_override(
            self.runtime.flag, body if isinstance(body, bytes) else b"", actor="admin-token",
            store=self.runtime.store, mode=self.config.mode, page=fleet_page(self.runtime),
        )
        return raw.json_response(status, payload)
