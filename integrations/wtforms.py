"""``EnforcementTokenField`` for WTForms and Flask-WTF: a refusal is an error on the form.

    from failopen.integrations.wtforms import EnforcementTokenField

    class SignupForm(FlaskForm):
        email = EmailField(validators=[DataRequired()])
        token = EnforcementTokenField(outage="fallback")   # outage= is optional

    app.extensions["failopen"] = runtime    # the FailOpen to ask (the WSGI middleware's .runtime)

The field renders the hidden input the browser snippet fills, named after ``token_field``
(``enforcement-token``) whatever the form field is called and without a value (a token is good
once), and ``validate`` asks the guard what the WSGI middleware would ask: the flag, the route's
outage policy (the stricter of ``FAILOPEN_OUTAGE_POLICY_ROUTES``' and ``outage=``), the fallback
challenge (``altcha``), the verify call, the audit. A refusal, 503-type ones included, stops the
field's validation with a fixed message in ``field.errors``; ``field.decision`` holds the
decision either way, and ``environ["failopen.decision"]`` too, as the middleware sets it.

Which FailOpen: ``runtime=`` on the field, else Flask's ``current_app.extensions["failopen"]``
(the FailOpen, or the middleware that holds it; anything else there refuses the form), else one
built once per process from the ``FAILOPEN_*`` variables (as ``FailOpenMiddleware(app)`` builds
its own). Which request: ``meta={"request": ...}`` on the form (a WSGI environ, or a
request with ``.environ``), else Flask's ``request``. Without one the field refuses and logs why.
A request the WSGI middleware already judged is not judged again (a token is good once at the
vendor) unless the field asks for a stricter outage policy. Nothing raises into the view.
"""

# WTForms ships no type information: its names are Any here.
# mypy: disable-error-code="import-untyped"
# mypy: allow-subclassing-any

from __future__ import annotations

try:
    import wtforms  # noqa: F401 - fail early, usefully
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise ImportError(
        'failopen.integrations.wtforms needs WTForms: pip install "failopen[wtforms]" '
        '(Flask-WTF brings it too)'
    ) from exc

import logging
import threading
from collections.abc import Mapping
from typing import Any

from markupsafe import Markup
from wtforms import Field
from wtforms.validators import StopValidation
from wtforms.widgets import HiddenInput, html_params

from failopen import web
from failopen.config import Config
from failopen.engine.decision import Decision, public_outcome
from failopen.engine.outage import strictest
from failopen.runtime import FailOpen

from . import _forms

__all__ = ["EnforcementTokenField", "EnforcementTokenInput"]

logger = logging.getLogger("failopen.wtforms")

_NO_REQUEST = ("EnforcementTokenField has no request to judge, so it refuses the form: validate "
               "it inside a Flask request, or pass one: Form(formdata, meta={'request': environ})")
# Where a WSGI server puts the fallback solution's header, as the WSGI middleware reads it.
_SOLUTION_KEY = "HTTP_" + web.SOLUTION_HEADER.upper().replace("-", "_")


class EnforcementTokenInput(HiddenInput):
    """A hidden input named after the token field (the name the snippet fills), never with a
    value: a re-rendered form gets a fresh token."""

    def __call__(self, field: Any, **kwargs: Any) -> Markup:
        if field.widget_posts_field:
            # Where the vendor's widget goes (and which form the snippet protects); no input:
            # an empty one of the vendor's field, posted before the token, would hide it.
            return Markup(_forms.WIDGET_MARK)
        kwargs.setdefault("id", field.id)
        kwargs.pop("value", None)
        return Markup(f"<input {html_params(type='hidden', name=field.token_field, **kwargs)}>")


class EnforcementTokenField(Field):
    """A form field that needs a verified enforcement token, or the route's outage policy to let
    the form through; declared as ``token = EnforcementTokenField(outage=None)``."""

    widget = EnforcementTokenInput()

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # Declaring the field makes an UnboundField: check outage= now, not at the first form.
        _forms.check_outage(kwargs.get("outage"))
        return super().__new__(cls, *args, **kwargs)

    def __init__(self, label: str | None = None, validators: Any = None, *,
                 outage: str | None = None, runtime: FailOpen | None = None,
                 messages: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(label if label is not None else "", validators, **kwargs)
        #: The outage policy this form asks for, over its route's: the stricter one applies.
        self.outage = _forms.check_outage(outage)
        self.messages = {**_forms.MESSAGES, **(messages or {})}
        self._runtime = runtime
        #: The guard's decision once validated (None before).
        self.decision: Decision | None = None
        self.token: str | None = None
        self.solution: str | None = None

    @property
    def token_field(self) -> str:
        """The name the token is posted under (``token_field``), whatever this field is called."""
        try:
            return self.runtime().config.token_field
        except Exception:  # no runtime yet: validation refuses; render the default name
            return Config.token_field

    @property
    def solution_field(self) -> str:
        """Where a fallback route's answer is posted: ALTCHA's field, or the second vendor's."""
        try:
            return self.runtime().config.fallback_token_field
        except Exception:  # no runtime yet: validation refuses; ALTCHA's, as before
            return web.SOLUTION_FIELD

    @property
    def widget_posts_field(self) -> bool:
        """True when the vendor's own widget adds the token's input (Turnstile, reCAPTCHA...)."""
        try:
            return self.runtime().config.provider.widget_posts_field
        except Exception:  # no runtime yet: render failopen's input, as for the default
            return False

    def runtime(self) -> FailOpen:
        """The FailOpen to ask: ``runtime=``, Flask's ``app.extensions["failopen"]``, else one
        built from the ``FAILOPEN_*`` variables."""
        return self._runtime or _flask_runtime() or _default_runtime()

    def process(self, formdata: Any, data: Any = None, extra_filters: Any = None) -> None:
        """Read the token (and a fallback solution) under their own names from the form data."""
        self.process_errors: list[str] = []
        self.raw_data: list[str] = []
        self.data = self.token = self.solution = self.decision = None
        if formdata is not None:
            self.token = _forms.first(formdata.getlist(self.token_field))
            self.solution = _forms.first(formdata.getlist(self.solution_field))

    def _value(self) -> str:
        return ""

    def populate_obj(self, obj: Any, name: str) -> None:
        """Nothing to store: the token is not the person's input."""

    def pre_validate(self, form: Any) -> None:
        """Ask the guard; a refusal stops this field's validation with its message."""
        self.decision = decision = self._decision(form)
        if not decision.allow:
            raise StopValidation(self.gettext(self.messages.get(public_outcome(decision.outcome))
                                              or _forms.message(decision)))

    def _decision(self, form: Any) -> Decision:
        try:
            environ = _environ_of(form)
            if environ is None:
                logger.error(_NO_REQUEST)
                return _forms.failed()
            earlier = environ.get("failopen.decision")
            if isinstance(earlier, Decision) and _forms.answers(earlier, self.outage):
                return earlier
            decision = self._ask(self.runtime(), environ)
            environ["failopen.decision"] = decision
            return decision
        except Exception:
            logger.exception("failopen form field could not decide; refusing the form")
            return _forms.failed()

    def _ask(self, runtime: FailOpen, environ: dict[str, Any]) -> Decision:
        """The decision for this request, as the WSGI middleware asks it."""
        config = runtime.config
        inner = str(environ.get("PATH_INFO") or "")
        path = str(environ.get("SCRIPT_NAME") or "") + inner
        found = web.RoutePolicies.from_config(config).for_path(path, inner)
        route, policy = found if found is not None else (path, config.outage_policy)
        if self.outage is not None:
            policy = strictest({policy, self.outage})
        client = str(environ.get("REMOTE_ADDR") or "")
        if config.trusted_networks:
            client = web.client_address(client, environ.get("HTTP_X_FORWARDED_FOR"),
                                        config.trusted_networks)
        header = "HTTP_" + config.token_header.strip().upper().replace("-", "_")
        # The form's own field first (the contract), then the header a script may send.
        token = self.token or environ.get(header) or None
        solution = environ.get(_SOLUTION_KEY) or self.solution
        return _forms.decide(runtime, token, path=path, client=client,
                             user_agent=str(environ.get("HTTP_USER_AGENT") or ""),
                             policy=policy, route=route, solution=solution)


def _environ_of(form: Any) -> dict[str, Any] | None:
    """The WSGI environ of the request: the form's ``meta.request``, else Flask's request."""
    given = getattr(getattr(form, "meta", None), "request", None)
    if given is None:
        try:
            from flask import has_request_context, request
        except ImportError:  # plain WTForms without Flask: only meta.request says
            return None
        given = request.environ if has_request_context() else None
    environ = given if isinstance(given, dict) else getattr(given, "environ", None)
    return environ if isinstance(environ, dict) else None


def _flask_runtime() -> FailOpen | None:
    """``current_app.extensions["failopen"]`` inside a Flask app context (a FailOpen, or the
    WSGI middleware, whose ``.runtime`` it is), else None.

    TypeError for anything else there: the site meant to name the FailOpen, and one built from
    the variables instead would keep a flag of its own, which an operator's override placed
    through the middleware never reaches. The field then refuses, saying why in the log.
    """
    try:
        from flask import current_app, has_app_context
    except ImportError:
        return None
    if not has_app_context():
        return None
    given = current_app.extensions.get("failopen")
    if given is None:
        return None
    runtime = given if isinstance(given, FailOpen) else getattr(given, "runtime", None)
    if not isinstance(runtime, FailOpen):
        raise TypeError(f"app.extensions['failopen'] holds a {type(given).__name__}, not the "
                        "FailOpen to ask (the WSGI middleware's .runtime)")
    return runtime


_lock = threading.Lock()
_runtime: FailOpen | None = None


def _default_runtime() -> FailOpen:
    """One FailOpen per process from the ``FAILOPEN_*`` variables, built on first use."""
    global _runtime
    with _lock:
        if _runtime is None:
            _runtime = FailOpen(Config.from_env())
            logger.info("failopen.integrations.wtforms: built a FailOpen from the FAILOPEN_* "
                        "variables (set app.extensions['failopen'] to share the middleware's)")
        return _runtime
