"""Pure ASGI middleware: guards protected routes and serves failopen's own routes.

    from failopen.integrations.asgi import FailOpenMiddleware
    app = FailOpenMiddleware(app)                              # FAILOPEN_* environment variables
    app = FailOpenMiddleware(app, config=failopen.Config(...))

Per ``http`` request, in this order::

    <prefix>/flag, <prefix>/failopen.js, <prefix>/failopen-solver.js, <prefix>/failopen-<vendor>.js,
    <prefix>/override ........................................ answered here (override: only with
                                                               an admin token configured; wrong
                                                               tokens logged one line a minute)
    protected method + path (any case of the method; the path with or without root_path,
    merged slashes, resolved dot segments, cut at a control character, whitespace or ";",
    decoded once more; "/x/" also covers "/x" and "/x\n")
                                                               token -> guard -> 403 / 429 /
                                                               503 / 413, or the app, with the
                                                               Decision in
                                                               scope["state"]["failopen"] (flag
                                                               off: the app, body left unread)
    anything else ............................................ the app, receive untouched

A refusal is JSON for API clients and a small HTML page for browsers (``web.prefers_json``, as
WSGI and Django choose), or the site's own page: ``reject=`` (``_asgi_reject``).

Built around a Django application it refuses to start: Django's own middleware decides from the
resolved view. Building it logs what keeps failopen from its job (no status URL: ERROR; the
override route with the ``memory:`` store, which answers 409: WARNING; an unknown ``FAILOPEN_*``
variable, or nothing protected: WARNING) and one INFO line saying what it protects, with which
evidence, store and mode.

``lifespan`` starts the watcher on startup and stops it after the app's own shutdown; without
lifespan the first guarded request starts it. Other scope types pass straight through. The
decision lives in ``failopen.engine.guard`` and every wire format in ``failopen.web``: this module
only translates ASGI messages.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import parse_qsl

from failopen import web
from failopen.config import Config
from failopen.engine.guard import Decision, fail_closed
from failopen.runtime import FailOpen

from . import _asgi_body as raw
from ._asgi_reject import Reject, site_page
from ._shared import (
    adapter_runtime,
    adapter_snippet,
    check_prefix,
    fleet_page,
    report_misconfiguration,
    unguarded_methods,
)

SOLUTION_HEADER = web.SOLUTION_HEADER.lower().encode("ascii")

__all__ = ["FailOpenMiddleware"]

logger = logging.getLogger("failopen.asgi")

_Route = Callable[["raw.Scope", "raw.Receive"], Awaitable["raw.Response | None"]]


def _other_spelling(path: str, root_path: str) -> str:
    """The path with root_path dropped (what Starlette and Django route on), or added (servers
    from before ASGI said that path includes it): the app routes on one of the two."""
    if not root_path:
        return path
    return path[len(root_path):] if path.startswith(root_path) else root_path + path




def _static(scope: raw.Scope, etag: str, ok: raw.Response,
            not_modified: raw.Response) -> raw.Response:
    """A file of the snippet: 200, or 304 when the browser's copy is current."""
    if scope["method"] not in ("GET", "HEAD"):
        return raw.method_not_allowed("GET, HEAD")
    match = raw.header(scope, b"if-none-match")
    if etag and match is not None and raw.etag_listed(match, etag):
        return not_modified
    return ok


class FailOpenMiddleware:
    """failopen around any ASGI app (Starlette, FastAPI, Quart); Django has its own middleware."""

    def __init__(
        self,
        app: raw.ASGIApp,
        *,
        config: Config | None = None,
        runtime: FailOpen | None = None,
        prefix: str = "/failopen",
        snippet_path: Path | None = None,
        reject: Reject | None = None,
    ) -> None:
        self._page = site_page(reject)  # first: a TypeError here leaves no watcher behind
        runtime = adapter_runtime(app, config=config, runtime=runtime, kind="ASGI")
        self.app = app
        self.runtime = runtime
        self.config = config = runtime.config
        self.prefix = check_prefix(prefix)
        # Everything a request needs is computed here: a route that is not protected then costs
        # a few comparisons.
        self._is_protected = config.is_protected  # any method case, HEAD with GET, path spellings
        self._token_header = config.token_header.strip().lower().encode("ascii")
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
        # A method no path is protected for (GET, when only POST is): no path to look at.
        self._unguarded = unguarded_methods(config, prefix)
        # A flood of wrong admin tokens is one log line per interval, not one per request.
        self._refusals = web.RefusalLog(logger, clock=runtime.clock)
        self._store_shared = web.store_is_shared(runtime.store)
        self._store_not_shared = raw.json_response(409, web.STORE_NOT_SHARED)
        report_misconfiguration(logger, runtime, self._routes.get(prefix + "/override") is not None,
                                 prefix)
        snippet = adapter_snippet(logger, snippet_path, prefix)
        self._etag = snippet.etag if snippet is not None else ""
        self._snippet_200, self._snippet_304 = raw.snippet_responses(snippet)

    def __repr__(self) -> str:
        return f"FailOpenMiddleware(app={self.app!r}, prefix={self.prefix!r})"

    async def __call__(self, scope: raw.Scope, receive: raw.Receive, send: raw.Send) -> None:
        """Handle one ASGI connection."""
        # The fast path: an HTTP request with a method guarded nowhere, mounted at the root and
        # not one of our routes. Anything else (lifespan too): the full check below.
        if (scope["type"] == "http" and scope["method"] in self._unguarded
                and not scope.get("root_path") and scope["path"] not in self._routes):
            await self.app(scope, receive, send)
            return
        kind = scope["type"]
        if kind != "http":
            if kind == "lifespan":
                await self._lifespan(scope, receive, send)
            else:
                await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        other = _other_spelling(path, scope.get("root_path") or "")
        route = self._routes.get(path) or self._routes.get(other)
        if route is not None:
            await self._answer(route, scope, receive, send)
            return
        # Django upper-cases the method it routes on: "post" runs the POST view.
        method = scope["method"]
        if self._is_protected(method, path) or (
                other != path and self._is_protected(method, other)):
            await self._guarded(scope, receive, send, path)
            return
        await self.app(scope, receive, send)

    # --- protected routes -------------------------------------------------------------------

    async def _guarded(
        self, scope: raw.Scope, receive: raw.Receive, send: raw.Send, path: str
    ) -> None:
        try:
            outcome = await self._decide(scope, receive, path)
        except Exception:
            # A bug in failopen must neither reach the server nor open the gate.
            logger.exception("failopen failed on a protected route; refusing the request")
            outcome = self._internal_error, receive
        head = scope["method"].upper() == "HEAD"  # guarded when GET is: headers only
        if isinstance(outcome, raw.Response):
            await outcome.send(send, head=head)
        elif outcome is None:
            return  # the client left while sending its body: nobody to answer
        elif not outcome[0].allow:
            await self._refuse(scope, outcome[1], send, outcome[0], head)
        else:
            # Outside the try: the app's own exceptions reach the server unchanged.
            await self.app(scope, outcome[1], send)

    async def _refuse(self, scope: raw.Scope, receive: raw.Receive, send: raw.Send,
                      decision: Decision, head: bool) -> None:
        if self._page is not None and await self._page.send(scope, receive, send, decision,
                                                            head=head):
            return
        try:
            as_json = raw.wants_json(scope)
        except Exception:
            if decision is not self._internal_error:  # else already logged, with its cause
                logger.exception("failopen failed on a protected route; refusing the request")
            as_json, decision = True, self._internal_error
        await raw.rejection(decision, as_json=as_json).send(send, head=head)

    async def _decide(
        self, scope: raw.Scope, receive: raw.Receive, path: str
    ) -> tuple[Decision, raw.Receive] | raw.Response | None:
        client = scope.get("client")
        address = client[0] if client else ""
        if self._trusted:  # behind our own proxies: the client they forwarded for
            # Every X-Forwarded-For, joined in order as Django and WSGI servers join them: a
            # proxy appends to the last one, so the right-most entries are its own.
            address = web.client_address(address, raw.joined_header(scope, b"x-forwarded-for"),
                                         self._trusted)
        # Scanned for only when the audit file keeps its hash.
        agent = _user_agent(scope) if self.runtime.wants_user_agent else ""
        route, policy, solution = "", "open", None
        if not self._plain:
            found = self._policies.for_path(path,
                                            _other_spelling(path, scope.get("root_path") or ""))
            route, policy = found if found is not None else (path, self._policies.default)
            solution = raw.header(scope, SOLUTION_HEADER)
        # Enforcement off: nobody looks at the token, so the body is neither capped nor parsed
        # (unless a fallback route's solution may be in it).
        # Awaited: a route whose outage policy asks the fleet's Redis asks it off the loop.
        decision = await self.runtime.abypass(path=path, client=address, user_agent=agent,
                                              policy=policy, route=route, solution=solution)
        app_receive = receive
        if decision is None:
            judged = await self._judge(scope, receive, path, address, agent, policy, route,
                                       solution)
            if judged is None or isinstance(judged, raw.Response):  # 413, or the client left
                return judged
            decision, app_receive = judged
        state = scope.get("state")
        if state is None:
            scope["state"] = state = {}
        state["failopen"] = decision
        return decision, app_receive

    async def _judge(
        self, scope: raw.Scope, receive: raw.Receive, path: str, address: str, agent: str = "",
        policy: str = "open", route: str = "", solution: str | None = None,
    ) -> tuple[Decision, raw.Receive] | raw.Response | None:
        token = content_type = length = None
        # The first of repeated headers, as Starlette and Django read them.
        for name, value in scope["headers"]:
            if name == self._token_header:
                token = token or value.decode("latin-1")
            elif name == b"content-type":
                content_type = content_type if content_type is not None else value.decode(
                    "latin-1")
            elif name == b"content-length":
                length = length if length is not None else value
        app_receive = receive
        wants_solution = policy == "fallback" and solution is None
        if (not token or wants_solution) and raw.body_may_carry_token(content_type):
            read = await raw.read_body(receive, self.config.max_body_bytes,
                                       declared=raw.declared_length(length))
            if read == raw.TOO_LARGE:
                return raw.BODY_TOO_LARGE
            if read == raw.DISCONNECTED:
                return None
            body, messages = read
            # On the loop: its cost is bounded per byte (failopen.web; bench_asgi_body.py).
            token = token or web.token_from_body(content_type, body, self.config.token_field)
            if wants_solution:
                # ALTCHA's field, or the second vendor's own (FAILOPEN_FALLBACK_VENDOR).
                solution = web.token_from_body(content_type, body,
                                               self.config.fallback_token_field)
            app_receive = raw.Replay(messages, receive)
        return await self.runtime.adecide(token, path=path, client=address, user_agent=agent,
                                          policy=policy, route=route,
                                          solution=solution), app_receive

    # --- failopen's own routes --------------------------------------------------------------

    async def _answer(
        self, route: _Route, scope: raw.Scope, receive: raw.Receive, send: raw.Send
    ) -> None:
        try:
            response = await route(scope, receive)
        except Exception:
            logger.exception("failopen route %s failed", scope["path"])
            response = raw.rejection(self._internal_error, as_json=True)
        if response is not None:
            await response.send(send, head=scope["method"].upper() == "HEAD")

    async def _flag(self, scope: raw.Scope, receive: raw.Receive) -> raw.Response:
        if scope["method"] not in ("GET", "HEAD"):
            return raw.method_not_allowed("GET, HEAD")
        self.runtime.ensure_started()
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"),
                          keep_blank_values=True)
        confirm = next((value for name, value in query if name == "confirm"), None)
        # aconfirm never turns enforcement off by itself: only a confirmed outage does.
        state = await self.runtime.aconfirm() if web.wants_confirm(confirm) else self.runtime.state
        asked = next((value for name, value in query if name == "path"), None)
        # Asked with the form's action as the browser reads it: root_path in front.
        found = self._policies.for_asked(asked, scope.get("root_path") or "")
        payload = web.flag_payload(state, mode=self.config.mode, probe=self.runtime.probe,
                                   outage_policy=found[1] if found is not None else None,
                                   poll=self.runtime.watcher,
                                   challenge=web.fallback_challenge(self.config),
                                   action=web.route_action(self.config,
                                                           found[0] if found else None))
        return raw.raw_response(200, web.FLAG_HEADERS, json.dumps(payload).encode())

    async def _challenge(self, scope: raw.Scope, receive: raw.Receive) -> raw.Response:
        if scope["method"] not in ("GET", "HEAD"):
            return raw.method_not_allowed("GET, HEAD")
        self.runtime.ensure_started()
        status, payload = web.challenge_answer(self.runtime.state, self.runtime.challenges,
                                               mode=self.config.mode)
        return raw.raw_response(status, web.FLAG_HEADERS, json.dumps(payload).encode())

    async def _snippet(self, scope: raw.Scope, receive: raw.Receive) -> raw.Response:
        return _static(scope, self._etag, self._snippet_200, self._snippet_304)

    async def _companion(self, etag: str, fresh: raw.Response, unchanged: raw.Response,
                         scope: raw.Scope, receive: raw.Receive) -> raw.Response:
        return _static(scope, etag, fresh, unchanged)

    async def _override(self, scope: raw.Scope, receive: raw.Receive) -> raw.Response | None:
        if scope["method"] != "POST":
            return raw.method_not_allowed("POST")
        # Browsers never attach a bearer token by themselves, so this route needs no CSRF check.
        given = web.bearer_token(raw.header(scope, b"authorization"))
        if given is None:
            return raw.UNAUTHORIZED
        if not web.admin_token_matches(given, self.config.admin_token):
            client = scope.get("client")
            self._refusals.refused("wrong admin token", client[0] if client else "")
            return raw.FORBIDDEN
        if not self._store_shared:  # before the body: nothing in it can change the answer
            return self._store_not_shared
        length = raw.header(scope, b"content-length")
        read = await raw.read_body(receive, web.MAX_OVERRIDE_BODY, declared=raw.declared_length(
            length.encode("latin-1") if length is not None else None))
        if read == raw.TOO_LARGE:
            return raw.BODY_TOO_LARGE
        if read == raw.DISCONNECTED:
            return None
        # handle_override writes the store and waits for the fleet to apply it: keep the event
        # loop free meanwhile.
        status, payload = await asyncio.to_thread(
            web.handle_override, self.runtime.flag, read[0], actor="admin-token",
            store=self.runtime.store, mode=self.config.mode, page=fleet_page(self.runtime),
        )
        return raw.json_response(status, payload)

    # --- lifespan ---------------------------------------------------------------------------

    async def _lifespan(self, scope: raw.Scope, receive: raw.Receive, send: raw.Send) -> None:
        async def lifespan_receive() -> raw.Message:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    self.runtime.start()
                except Exception:
                    logger.exception("failopen: starting the watcher failed; it starts lazily")
            return message

        async def lifespan_send(message: raw.Message) -> None:
            # After the app's own shutdown handlers, which may still use failopen; and after a
            # failed startup, which the server answers by exiting without a shutdown.
            if message["type"] in ("lifespan.shutdown.complete", "lifespan.shutdown.failed",
                                   "lifespan.startup.failed"):
                try:
                    await self.runtime.aclose()
                except Exception:
                    logger.exception("failopen: stopping the watcher failed")
            await send(message)

        # An app without lifespan support raises here as it would unwrapped: the server then
        # runs without lifespan, and the watcher starts on the first guarded request.
        await self.app(scope, lifespan_receive, lifespan_send)


def _user_agent(scope: raw.Scope) -> str:
    """The first User-Agent header, as Starlette reads it ("" when absent)."""
    for name, value in scope.get("headers", ()):
        if name == b"user-agent":
            return bytes(value).decode("latin-1")
    return ""
