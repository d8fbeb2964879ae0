"""URLconf of the form-field tests: real forms with an EnforcementTokenField in real views (sync,
async, class-based, ``@protect``-ed), which re-render the form with its errors when it is not
valid, as a site's sign-up page does."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django import forms
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import include, path
from django.views.generic import FormView
from failopen.integrations.django import protect
from failopen.integrations.django.forms import EnforcementTokenField


class SignupForm(forms.Form):
    email = forms.EmailField()
    token = EnforcementTokenField()


class ClosedForm(SignupForm):
    token = EnforcementTokenField(outage="closed")


class FallbackForm(SignupForm):
    token = EnforcementTokenField(outage="fallback")


class LooseForm(SignupForm):
    token = EnforcementTokenField(outage="open")


class RequestForm(SignupForm):
    """Keeps the request, as Django's AuthenticationForm and django-allauth's forms do."""

    def __init__(self, *args: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.request = request


FORMS: dict[str, type[SignupForm]] = {"open": SignupForm, "closed": ClosedForm,
                                      "fallback": FallbackForm, "loose": LooseForm}


def respond(request: HttpRequest, form: forms.Form, valid: bool) -> HttpResponse:
    """JSON when the form was valid (what the test checks), else the page again."""
    if not valid:
        return render(request, "forms_signup.html", {"form": form})
    decision = form.cleaned_data["token"]
    return JsonResponse({"ok": True, "email": form.cleaned_data["email"],
                         "outcome": decision.outcome, "bypassed": decision.bypassed,
                         "request": request.failopen.outcome})  # type: ignore[attr-defined]


def signup(request: HttpRequest, kind: str) -> HttpResponse:
    form = FORMS[kind](request.POST or None)
    return respond(request, form, request.method == "POST" and form.is_valid())


async def asignup(request: HttpRequest, kind: str) -> HttpResponse:
    form = FORMS[kind](request.POST or None)
    # Form validation is sync and the verify call blocks: off the event loop, as Django advises.
    valid = request.method == "POST" and await sync_to_async(form.is_valid)()
    return await sync_to_async(respond)(request, form, valid)


def explicit(request: HttpRequest) -> HttpResponse:
    form = RequestForm(request.POST or None, request=request)
    return respond(request, form, request.method == "POST" and form.is_valid())


def two_forms(request: HttpRequest) -> HttpResponse:
    """Two forms of one request: the second must reuse the first's decision."""
    first, second = SignupForm(request.POST), SignupForm(request.POST, prefix="again")
    return JsonResponse({"valid": [first.is_valid(), second.is_valid()]})


def disabled(request: HttpRequest) -> HttpResponse:
    form = SignupForm(request.POST)
    form.fields["token"].disabled = True  # a view switching the check off by mistake
    return respond(request, form, form.is_valid())


@protect
def protected(request: HttpRequest, kind: str) -> HttpResponse:
    return signup(request, kind)


@protect
def reset(request: HttpRequest) -> HttpResponse:
    """A protected view with no form field of its own (the middleware is its only check)."""
    return JsonResponse({"ran": True})


class PeekMiddleware:
    """A site's middleware after FailOpenMiddleware that looks at the sign-up form before any
    view runs (to log who tried), and goes on whatever it finds."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method == "POST":
            RequestForm(request.POST, request=request).is_valid()
        return self.get_response(request)  # type: ignore[no-any-return]


class SignupView(FormView):  # type: ignore[type-arg]
    form_class = SignupForm
    template_name = "forms_signup.html"

    def form_valid(self, form: forms.Form) -> HttpResponse:
        return respond(self.request, form, True)


urlpatterns = [
    path("forms/async/<str:kind>/", asignup),
    path("forms/explicit/", explicit),
    path("forms/two/", two_forms),
    path("forms/disabled/", disabled),
    path("forms/view/", SignupView.as_view()),
    path("forms/protected/<str:kind>/", protected, name="forms-protected"),
    path("forms/reset/", reset),
    path("forms/<str:kind>/", signup, name="forms-signup"),
    path("failopen/", include("failopen.integrations.django.urls")),
]
