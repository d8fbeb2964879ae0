"""What the ASGI and WSGI middlewares share: the prefix and ``reject=`` checks, the Django
refusal's detection and the start-up report. No framework is imported here."""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
from pathlib import Path

from failopen import web
from failopen._variables import warn_unknown_variables
from failopen.config import Config
from failopen.exceptions import ConfigError
from failopen.runtime import FailOpen

from ._announce import announce, protection_text

__all__ = ["INNER_APPS", "METHODS", "adapter_runtime", "adapter_snippet", "check_prefix",
           "check_reject", "django_handler_in", "fleet_page", "is_async_callable", "referenced",
           "report_misconfiguration", "unguarded_methods"]

# The methods as servers pass them (upper case): the spellings a fast path may know. Any other
# spelling ("post", "PROPFIND") takes the full check.
METHODS = ("GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE", "TRACE", "CONNECT")


def unguarded_methods(config: Config, prefix: str) -> frozenset[str]:
    """The methods no path is protected for, spelled exactly as a server passes them: a request
    with one of these is failopen's own route or the app's, whatever its path.

    Asked of ``Config.is_protected`` itself, at each listed path: a listed path is protected by
    its own prefix, so a method refused there has failed the method test, which comes before
    any path is looked at. Empty (no fast path) when nothing is listed, and when the prefix is not
    ASCII: the fast path compares the server's raw path with the routes' text, which only ASCII
    keeps alike.
    """
    paths = config.protected_paths
    if not paths or not prefix.isascii():
        return frozenset()
    return frozenset(method for method in METHODS
                     if not any(config.is_protected(method, path) for path in paths))


def fleet_page(runtime: FailOpen) -> str | None:
    """The hash of the status page this deployment watches: the override endpoints count only
    the processes of this deployment as reached (None: no fleet, or no status page)."""
    return runtime.fleet.watched.page if runtime.fleet is not None else None


def check_prefix(prefix: object) -> str:
    """The ``prefix=`` of failopen's own routes, or a ConfigError saying what one looks like."""
    if (not isinstance(prefix, str) or not prefix.startswith("/") or prefix.endswith("/")
            or not prefix.isprintable() or any(c in prefix for c in " ?#%")):
        raise ConfigError(
            "FailOpenMiddleware(prefix=...): expected a path like '/failopen' (starting with "
            f"'/', no trailing '/', no spaces, query or fragment), got {prefix!r}"
        )
    return prefix


def is_async_callable(function: object) -> bool:
    """True for an ``async def`` function, method, callable object or partial of one."""
    while isinstance(function, functools.partial):
        function = function.func
    # An object's async __call__ counts too (B004 is about testing callability: not done here).
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(
        getattr(function, "__call__", None))  # noqa: B004


def check_reject(reject: object, request: str, *, sync_only: bool = False) -> None:
    """``reject=`` is None or callable as ``reject(<request>, decision)``: a TypeError now
    rather than failopen's own page, and an ERROR line, on every refusal."""
    if reject is None:
        return
    usage = f"reject({request}, decision) returning the response"
    if not callable(reject):
        raise TypeError(f"FailOpenMiddleware(reject=...): expected a callable {usage}, or None; "
                        f"got {type(reject).__name__}")
    if sync_only and is_async_callable(reject):
        raise TypeError(f"FailOpenMiddleware(reject=...): WSGI cannot await {reject!r}; give "
                        f"a plain function {usage}")
    try:
        inspect.signature(reject).bind(None, None)
    except ValueError:  # no signature to read (a builtin): its first refusal will tell
        return
    except TypeError as error:  # a Response itself, say, where a function returning one goes
        raise TypeError(f"FailOpenMiddleware(reject=...): it is called as {usage}, and "
                        f"{reject!r} cannot be: {error}") from None


# Where ASGI and WSGI middleware, routers and wrappers keep the app they hand requests to
# (werkzeug's DispatcherMiddleware: "mounts"; Flask: "wsgi_app").
INNER_APPS = ("app", "application", "_app", "__wrapped__", "func", "routes", "router",
              "application_mapping", "mounts", "wsgi_app")


def django_handler_in(app: object) -> str | None:
    """The class name of a Django handler (ASGI or WSGI) that ``app`` is or wraps, else None.

    Follows ``.app`` and its kin through middleware, routers (Starlette's Mount) and protocol
    routers (Channels), and plain functions to what they call (closures, module globals),
    without importing Django: a Django handler is an instance of
    ``django.core.handlers.base.BaseHandler`` (ASGIHandler, WSGIHandler) or a subclass.
    """
    seen: set[int] = set()
    todo = [app]
    while todo and len(seen) < 256:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        for cls in type(item).__mro__:
            # ASGIHandler, or WSGIHandler behind a WSGI-to-ASGI adapter: both resolve views.
            if cls.__module__ == "django.core.handlers.base" and cls.__name__ == "BaseHandler":
                return f"{type(item).__module__}.{type(item).__qualname__}"
        # A lazy object (Django's settings) may raise on any attribute: not ours to judge.
        with contextlib.suppress(Exception):
            todo.extend(referenced(item))
        for name in INNER_APPS:
            try:
                inner = getattr(item, name, None)
            except Exception:  # a property of someone else's app: not ours to judge
                continue
            if isinstance(inner, dict):
                todo.extend(inner.values())
            elif isinstance(inner, (list, tuple)):
                todo.extend(inner)
            elif inner is not None and not isinstance(inner, (str, bytes, int, float)):
                todo.append(inner)
    return None


def referenced(item: object) -> list[object]:
    """What a plain function or bound method hands requests to: the object of a bound method,
    the variables it closes over, and the module globals it names (``async def application(...):
    await django_app(...)`` in a project's asgi.py)."""
    found: list[object] = []
    owner = getattr(item, "__self__", None)
    if owner is not None and not isinstance(owner, type):
        found.append(owner)
    function = getattr(item, "__func__", item)
    code = getattr(function, "__code__", None)
    if code is None:
        return found
    for cell in getattr(function, "__closure__", None) or ():
        try:
            found.append(cell.cell_contents)
        except ValueError:  # a cell not yet filled
            continue
    namespace = getattr(function, "__globals__", None)
    if isinstance(namespace, dict):
        found.extend(namespace[name] for name in code.co_names
                     if name in namespace and not isinstance(namespace[name], type))
    return found


def report_misconfiguration(
    logger: logging.Logger, runtime: FailOpen, override_route: bool, prefix: str, *,
    kind: str = "ASGI",
) -> None:
    """Log, as the server starts, what keeps failopen from doing its job (Django: checks), and
    one INFO line saying what it protects (WARNING when nothing)."""
    config = runtime.config
    warn_unknown_variables(logger)
    if config.protected_views:
        logger.warning(
            "FAILOPEN_PROTECTED_VIEWS (%s) is read by the Django adapter only: the %s middleware "
            "sees paths, not views, and ignores it. List the paths in FAILOPEN_PROTECTED_PATHS.",
            ", ".join(config.protected_views), kind)
    announce(logger, runtime, adapter=kind,
             protects=protection_text(config.protected_methods, config.protected_paths),
             nothing_hint="Set FAILOPEN_PROTECTED_PATHS to the log-in and sign-up paths "
                          "(e.g. FAILOPEN_PROTECTED_PATHS=/login,/signup) or "
                          "Config(protected_paths=...).")
    if config.sees_no_outage:
        # Not refused: enforcement still holds, and operator overrides still work.
        logger.error(
            "failopen has no status URL: it cannot see an outage, so it never fails open; every "
            "protected route answers 503 while the vendor is down. Set FAILOPEN_STATUS_URL to "
            "the vendor's status page (or Config(status_url=...)).")
    if override_route and not web.store_is_shared(runtime.store):
        logger.warning(
            "POST %s/override refuses every override: FAILOPEN_STORE is memory:, which only the "
            "worker that answered would see. Set FAILOPEN_STORE=file:///run/failopen/"
            "override.json (a directory only this user can write) for the override route.",
            prefix)


_DJANGO_REFUSED = (
    "FailOpenMiddleware ({kind}) wraps a Django application ({found}). It sees paths, not the "
    "views Django resolves them to, so FORCE_SCRIPT_NAME, i18n_patterns (/en/login/) or a second "
    "URL for the same view would reach a protected view unguarded. Use the Django middleware "
    "instead: add 'failopen.integrations.django.middleware.FailOpenMiddleware' to MIDDLEWARE and "
    "path(\"failopen/\", include(\"failopen.integrations.django.urls\")) to urls.py, and remove "
    "this {kind} wrapper."
)


def adapter_runtime(app: object, *, config: Config | None, runtime: FailOpen | None,
                    kind: str) -> FailOpen:
    """What both middlewares check first: no Django inside, one of config= or runtime=, and a
    token header a server can carry. Returns the runtime to use; raises ConfigError."""
    django = django_handler_in(app)
    if django is not None:
        raise ConfigError(_DJANGO_REFUSED.format(kind=kind, found=django))
    if runtime is None:
        runtime = FailOpen(config if config is not None else Config.from_env())
    elif config is not None and config != runtime.config:
        raise ConfigError("FailOpenMiddleware: pass config= or runtime=, not both "
                          "(a runtime carries its own config)")
    if not runtime.config.token_header.isascii():
        raise ConfigError("FAILOPEN_TOKEN_HEADER: an HTTP header name is plain ASCII")
    return runtime


def adapter_snippet(logger: logging.Logger, snippet_path: str | os.PathLike[str] | None,
                    prefix: str) -> web.Snippet | None:
    """The browser snippet an adapter serves (``snippet_path`` or the packaged one); None, said
    once in the log, when it cannot be read: ``GET <prefix>/failopen.js`` then answers 404."""
    where = Path(os.fspath(snippet_path)) if snippet_path is not None else web.SNIPPET_PATH
    snippet = web.load_snippet(where)
    if snippet is None:
        logger.warning("browser snippet not found at %s; GET %s/failopen.js answers 404",
                       where, prefix)
    return snippet
