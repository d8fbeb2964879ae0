"""``EnforcementTokenField``: protect a form, not a route; a refusal is an error on the form.

    from failopen.integrations.django.forms import EnforcementTokenField

    class SignupForm(forms.Form):
        email = forms.EmailField()
        token = EnforcementTokenField(outage="fallback")   # outage= is optional

The field renders the hidden input the browser snippet fills (named after ``TOKEN_FIELD``,
``enforcement-token``, whatever the form field is called, and never carrying a used token back),
and its ``clean`` asks the guard what the middleware would ask: the flag, the route's outage
policy (the stricter of the route's and ``outage=``), the fallback challenge (``altcha``), the
verify call, the audit. A refusal, 503-type ones included, is a ``ValidationError`` on the field
with a fixed message and the outcome as its ``code``; ``form.is_valid()`` is then False and the
page re-renders with what the person typed. ``cleaned_data[name]`` and ``request.failopen`` hold
the decision, as the middleware sets it.

The request (client address, path, User-Agent) is ``form.request`` when the form keeps one
(Django's AuthenticationForm, django-allauth's forms), else the one FailOpenMiddleware is passing
to the view. Without either the field refuses and logs why: it never guesses. A request the
middleware already judged is not judged again (a token is good once at the vendor), unless the
field asks for a stricter outage policy than the one applied. Nothing raises into the view: a
failure in failopen is a refusal on the field, logged.
"""

# Django ships no type information: its names are Any here.
# mypy: disable-error-code="import-untyped"
# mypy: allow-subclassing-any

from __future__ import annotations

import logging
from typing import Any, NamedTuple

from django import forms
from django.core.exceptions import ValidationError
from django.http import HttpRequest
from django.utils.safestring import mark_safe

from failopen.config import Config
from failopen.engine.decision import Decision, public_outcome
from failopen.engine.outage import strictest

from .. import _forms
from . import conf
from .middleware import SOLUTION_META_KEY, RequestDecision, _client, current_request
from .outage import route_policy

__all__ = ["EnforcementTokenField", "EnforcementTokenInput"]

logger = logging.getLogger("failopen.django")

_NO_REQUEST = (
    "EnforcementTokenField has no request to judge, so it refuses the form: add "
    "'failopen.integrations.django.middleware.FailOpenMiddleware' to MIDDLEWARE, or give the "
    "form the request (form.request = request, as AuthenticationForm keeps it)"
)


def _token_field() -> str:
    """The configured token field's name (the default while the settings are broken)."""
    config = conf.loaded().config
    return config.token_field if config is not None else Config.token_field


def _widget_posts_field() -> bool:
    """True when the vendor's own widget adds the token's input (Turnstile, reCAPTCHA...)."""
    config = conf.loaded().config
    return config is not None and config.provider.widget_posts_field


def _first(data: Any, name: str) -> str | None:
    """The first value posted as ``name`` (a QueryDict, or a plain dict a test or API built)."""
    getlist = getattr(data, "getlist", None)
    if callable(getlist):
        return _forms.first(getlist(name))
    value = data.get(name) if hasattr(data, "get") else None
    return _forms.first(value if isinstance(value, (list, tuple)) else (value,))


class EnforcementTokenInput(forms.HiddenInput):
    """A hidden input named after ``TOKEN_FIELD`` (no form prefix: the snippet fills that name),
    rendered empty: a token is good once, so a re-rendered form never sends it again."""

    def value_from_datadict(self, data: Any, files: Any, name: str) -> str | None:
        """The posted token, read under the configured name, not the form field's."""
        return _first(data, _token_field())

    # Shown as a field, not a hidden one: Django puts a hidden field's errors at the top of the
    # form as "(Hidden field token) ...", and the person should read the message where the check
    # sits, as with a captcha. The input itself is still type="hidden".
    is_hidden = False

    def use_required_attribute(self, initial: Any) -> bool:
        """No ``required`` attribute: the snippet fills the input, the person never does."""
        return False

    def get_context(self, name: str, value: Any, attrs: Any) -> dict[str, Any]:
        """The template context, under the token field's name and without a value."""
        return super().get_context(_token_field(), None, attrs)  # type: ignore[no-any-return]

    def render(self, name: str, value: Any, attrs: Any = None, renderer: Any = None) -> Any:
        """The hidden input; where another vendor's widget goes, only the element that marks
        where (no input: an empty one of the vendor's field, posted before the token, would
        hide it; the snippet adds the one it fills, and marks the form it protects by it)."""
        if _widget_posts_field():
            return mark_safe(_forms.WIDGET_MARK)
        return super().render(name, value, attrs, renderer)


class _Posted(NamedTuple):
    """What ``clean`` gets instead of a bare string: the token and the form it came in."""

    form: Any
    token: str | None


class _TokenBoundField(forms.BoundField):
    """Hands ``clean`` the form along with the token: the form knows the data and the request."""

    @property
    def data(self) -> _Posted:
        return _Posted(self.form, super().data)


class EnforcementTokenField(forms.Field):
    """A form field that needs a verified enforcement token, or the route's outage policy to let
    the form through; declared as ``token = EnforcementTokenField(outage=None)``."""

    widget = EnforcementTokenInput
    default_error_messages = dict(_forms.MESSAGES)

    def __init__(self, *, outage: str | None = None, **kwargs: Any) -> None:
        # required and disabled would be ways to skip the check: neither is a choice here.
        for name in ("required", "disabled"):
            if name in kwargs:
                raise TypeError(f"EnforcementTokenField() takes no {name}=: the token is always "
                                "checked")
        kwargs.setdefault("label", "")
        super().__init__(**kwargs)
        #: The outage policy this form asks for, over its route's: the stricter one applies.
        self.outage = _forms.check_outage(outage)

    def get_bound_field(self, form: Any, field_name: str) -> _TokenBoundField:
        """A bound field that passes the form to ``clean``."""
        return _TokenBoundField(form, self, field_name)

    def bound_data(self, data: Any, initial: Any) -> None:
        """Nothing to show again: a re-rendered form gets a fresh token from the snippet."""
        return None

    def has_changed(self, initial: Any, data: Any) -> bool:
        """Never part of ``changed_data``: the token is not the person's input."""
        return False

    def clean(self, value: Any) -> RequestDecision:
        """The guard's decision; a ``ValidationError`` with its outcome as code when refused."""
        decision = self._decision(value)
        if decision.allow:
            return RequestDecision(decision)
        # The code a client may see (form.errors.get_json_data()): never low_score, which would
        # tell a bot how it scored, nor misconfigured.
        code = public_outcome(decision.outcome)
        text = self.error_messages.get(code) or _forms.message(decision)
        raise ValidationError(text, code=code)

    def _decision(self, value: Any) -> Decision:
        try:
            if not isinstance(value, _Posted):
                # Set disabled after construction, or cleaned outside its form: nothing ties the
                # value to a request, so nothing may pass.
                logger.error("EnforcementTokenField got no posted form to judge (disabled, or "
                             "cleaned outside a form); refusing it")
                return conf.unavailable()
            request = _request_of(value.form)
            if request is None:
                logger.error(_NO_REQUEST)
                return conf.unavailable()
            return self._judge(request, value)
        except Exception:
            logger.exception("failopen form field could not decide; refusing the form")
            return _forms.failed()

    def _judge(self, request: HttpRequest, posted: _Posted) -> Decision:
        """Reuse the request's decision if it answers this field; else ask, as the middleware
        does, and leave the answer on ``request.failopen`` for the view and any other form."""
        earlier = getattr(request, "failopen", None)
        if isinstance(earlier, RequestDecision) and _forms.answers(earlier.decision, self.outage):
            return earlier.decision
        settings = conf.loaded()
        config = settings.config
        if config is None:
            decision = conf.unavailable()
        else:
            path = request.path_info
            match = getattr(request, "resolver_match", None)
            route, policy = route_policy(settings, path, getattr(match, "func", None),
                                         getattr(request, "urlconf", None))
            if self.outage is not None:
                policy = strictest({policy, self.outage})
            solution = request.META.get(SOLUTION_META_KEY) or _first(
                posted.form.data, config.fallback_token_field)
            # The form's own field first (the contract), then the header a script may send.
            token = posted.token or request.META.get(settings.token_meta_key) or None
            decision = _forms.decide(
                conf.runtime(), token, path=path, client=_client(request, config),
                user_agent=request.META.get("HTTP_USER_AGENT", ""), policy=policy, route=route,
                solution=solution)
        request.failopen = RequestDecision(decision)
        return decision


def _request_of(form: Any) -> HttpRequest | None:
    """The form's own request if it keeps one, else the one the middleware is handling."""
    request = getattr(form, "request", None)
    if isinstance(request, HttpRequest):
        return request
    return current_request.get()
