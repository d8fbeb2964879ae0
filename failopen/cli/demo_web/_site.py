"""What ``failopen demo --web`` runs: the test kit's fakes, one FailOpen over them, and the
timelines the page shows (flag transitions, the forms' decisions).

Three forms, each with its own outage policy (issue 20), set as a site sets them, in
``FAILOPEN_OUTAGE_POLICY_ROUTES``: log-in ``open``, sign-up ``fallback`` (the self-hosted
proof-of-work challenge), password reset ``closed``. The fallback needs ``failopen[fallback]``;
without it the site protects the log-in only and says which extra shows the other two.

With ``--vendor NAME`` (another vendor than the spec's) the fakes, the Config fields and the
scene buttons come from that vendor's stage (:mod:`._stages`); the forms, policies and timelines
are the same.

The scenes only change the fakes, as the vendor would; the flag follows from what the real
watcher reads. The override calls the flag's own verbs in this process: the demo never turns on
failopen's admin endpoint.
"""

from __future__ import annotations

import collections
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from failopen.cli.demo_web._stages import Scenes, stage_for
from failopen.config import Config
from failopen.engine.flag import FlagState, rfc3339
from failopen.engine.guard import Decision
from failopen.exceptions import ConfigError
from failopen.fallback.settings import require_extra
from failopen.providers.registry import DEFAULT_VENDOR
from failopen.runtime import FailOpen
from failopen.testing.browser_scripts import BrowserScriptFake
from failopen.testing.control import StatusPageControls, VendorScriptControls, VerifyAPIControls
from failopen.testing.providers import CaptchaVerifyFake
from failopen.testing.status_page import FakeStatusPage
from failopen.testing.vendor_script import FakeVendorScript
from failopen.testing.verify_api import FakeVerifyAPI
from failopen.web import RoutePolicies, flag_payload

__all__ = ["DemoForm", "DemoSite", "FORMS", "OUTAGE_SETTINGS", "OVERRIDES", "SCENES"]

PRIVATE_KEY = "demo-private-key"
PUBLIC_KEY = "demo-public-key"
REGIONS = ("us-east-1", "eu-west-1")
#: Seconds between status polls: short, so a visitor sees the flag flip within a second or two.
POLL_INTERVAL = 0.5
#: How long the page's "override off" lasts (the CLI's `failopen override off --ttl 5m`).
OVERRIDE_OFF_TTL = 300.0
TIMELINE = 30

#: The site's outage settings, written as a site writes them in its environment (the manual,
#: "Outage policies"); the fallback's secret is made for each run and never shown.
OUTAGE_SETTINGS = {
    "FAILOPEN_PROTECTED_PATHS": "/login,/signup,/password-reset",
    "FAILOPEN_OUTAGE_POLICY_ROUTES": "/login=open,/signup=fallback,/password-reset=closed",
}
#: Without ``failopen[fallback]``: the log-in alone, open as before issue 20.
LOGIN_ONLY_SETTINGS = {"FAILOPEN_PROTECTED_PATHS": "/login"}


@dataclass(frozen=True)
class DemoForm:
    """One form of the demo site: its name in URLs, what it posts where, and its inputs."""

    name: str
    title: str
    path: str
    button: str
    #: (name, type, value, autocomplete) of each visible input.
    inputs: tuple[tuple[str, str, str, str], ...]


#: The demo site's forms; the page shows each with its route's outage policy.
FORMS = (
    DemoForm("login", "Log in", "/login", "Log in", (
        ("username", "text", "demo", "username"),
        ("password", "password", "demo-password", "current-password"))),
    DemoForm("signup", "Sign up", "/signup", "Sign up", (
        ("username", "text", "new-user", "username"),
        ("email", "email", "new-user@example.com", "email"),
        ("password", "password", "new-password", "new-password"))),
    DemoForm("password-reset", "Password reset", "/password-reset", "Reset password", (
        ("email", "email", "demo@example.com", "email"),)),
)

# Public labels for the decisions timeline: what happened to the log-in, and why.
_VERDICTS = {
    "valid": ("admitted", "admitted: challenge passed, token verified"),
    "bypassed_flag_off": ("bypassed", "admitted without a challenge: enforcement is off"),
    "bypassed_confirmed_outage": ("bypassed", "admitted: verify failed during a confirmed outage"),
    "missing_token": ("refused", "refused 403: no challenge token"),
    "invalid_token": ("refused", "refused 403: token rejected"),
    "rate_limited": ("refused", "refused 503: verify call rate-limited"),
    "cannot_verify": ("refused", "refused 503: cannot verify now, no outage confirmed"),
    "internal_error": ("refused", "refused 503: failopen internal error"),
    "bypassed_fallback": ("bypassed", "admitted without the vendor: proof of work solved"),
    "fallback_required": ("refused", "refused 403: no proof-of-work solution"),
    "fallback_invalid": ("refused", "refused 403: proof-of-work solution refused"),
    "fallback_unavailable": ("refused", "refused 503: the second vendor cannot verify now"),
    "outage_closed": ("refused", "refused 503: closed during the outage"),
    "outage_rate_limited": ("refused", "refused 429: over the outage rate limit"),
}


class DemoSite:
    """The fakes, the runtime and the timelines of one web demo."""

    def __init__(self, *, poll_interval: float = POLL_INTERVAL,
                 vendor: str = DEFAULT_VENDOR) -> None:
        self.poll_interval = poll_interval
        #: Whose fakes play the vendor: ``--vendor``, the spec's by default.
        self.vendor = vendor
        self.stage = stage_for(vendor)
        #: Why the sign-up and password-reset forms are not shown (the extra is missing), or None.
        self.fallback_missing = _fallback_missing()
        #: The forms this site serves, and the outage settings it runs with (the secret apart).
        self.forms = FORMS if self.fallback_missing is None else FORMS[:1]
        self.settings = OUTAGE_SETTINGS if self.fallback_missing is None else LOGIN_ONLY_SETTINGS
        #: Each form's outage policy, as the runtime reads the settings (set by start()).
        self.policies: dict[str, str] = {}
        self.page: FakeStatusPage | None
        self.verify: FakeVerifyAPI | CaptchaVerifyFake
        self.script: FakeVendorScript | BrowserScriptFake
        #: The scene buttons: name -> (label, what it does to the fakes).
        self.scenes: Scenes
        if self.stage is None:
            self.page = FakeStatusPage(regions=REGIONS)
            self.verify = FakeVerifyAPI(private_key=PRIVATE_KEY)
            self.script = FakeVendorScript(verify_api=self.verify)
            self.scenes = SCENES
        else:
            stage = self.stage
            self.page, self.verify, self.script = stage.page, stage.verify, stage.script
            self.scenes = stage.scenes()
        self._lock = threading.Lock()
        self.transitions: collections.deque[dict[str, Any]] = collections.deque(maxlen=TIMELINE)
        self.decisions: collections.deque[dict[str, Any]] = collections.deque(maxlen=TIMELINE)
        self._decision_count = 0
        self.runtime: FailOpen | None = None

    # --- life cycle ---------------------------------------------------------------------------

    def start(self) -> FailOpen:
        """Serve the fakes on loopback (each with its /_control route) and build the runtime."""
        if self.page is not None:
            self.page.serve(control=True)
        self.verify.serve(control=True)
        self.script.serve(control=True)
        interval = self.poll_interval
        environ = dict(self.settings)
        if self.fallback_missing is None:
            # A secret of this run: signed challenges are good for this demo only.
            environ["FAILOPEN_FALLBACK_SECRET"] = secrets.token_urlsafe(32)
        timing: dict[str, Any] = {
            "poll_interval": interval, "poll_jitter": 0.0,
            # Loopback answers in milliseconds; a busy machine must not turn into status "errors".
            "status_timeout": max(interval, 1.0), "verify_timeout": max(interval, 1.0),
            "confirm_ttl": interval, "stale_after": 3 * interval,
            # Back to normal polling at once when the status page recovers from an error.
            "backoff_max": interval, "store_refresh": interval,
        }
        if self.stage is None:
            assert self.page is not None
            fakes: dict[str, Any] = {
                "status_url": self.page.url, "verify_url": self.verify.verify_url,
                "private_key": PRIVATE_KEY, "public_key": PUBLIC_KEY, "vendor_url": self.script.url}
        else:
            # The vendor's kit may time the probe faster still (its evidence when it has no page).
            fakes = self.stage.settings()
        # The outage settings as a site's environment gives them; the rest wires the fakes.
        config = Config.from_env(environ=environ, **{**timing, **fakes})
        self.runtime = runtime = FailOpen(config)
        routes = RoutePolicies.from_config(config)
        self.policies = {form.name: (routes.for_path(form.path) or ("", "open"))[1]
                         for form in self.forms}
        runtime.flag.add_listener(self._on_transition)
        self._record_transition(None, runtime.flag.state)
        return runtime

    def stop(self) -> None:
        """Stop the fakes (the server's lifespan stops the runtime)."""
        for fake in (self.page, self.verify, self.script):
            if fake is not None and fake.server is not None:
                fake.server.stop()

    @property
    def fake_urls(self) -> dict[str, str | None]:
        """Where each fake listens (``failopen emulate ... --url`` works on them too); the status
        page None for a vendor without one."""
        return {"status": None if self.page is None else self.page.url,
                "verify": self.verify.url, "vendor": self.script.url}

    # --- what the buttons do ------------------------------------------------------------------

    def play(self, scene: str) -> None:
        """Apply one scene to the fakes; KeyError for an unknown one."""
        self.scenes[scene][1](self)

    def reset(self) -> None:
        """The page's "Reset the demo": the vendor healthy again, no override, the timelines
        empty. The scene lives in this process, so a reloaded page shows it as it was left."""
        runtime = self._runtime()
        self.play("recovery")
        runtime.flag.automatic("demo page: reset")
        with self._lock:
            self.transitions.clear()
            self.decisions.clear()
        self._record_transition(None, runtime.flag.state)

    def override(self, verb: str) -> FlagState:
        """``off`` (five minutes), ``on`` or ``auto``, as an operator would; KeyError if unknown."""
        runtime = self._runtime()
        return OVERRIDES[verb][1](runtime)

    # --- timelines ----------------------------------------------------------------------------

    def _on_transition(self, old: FlagState, new: FlagState) -> None:
        # Only what a visitor follows: a new poll error is on the flag panel, and the watcher
        # and the guard's own confirmation reading the same page are one source to a reader.
        if _shown(old) != _shown(new):
            self._record_transition(old, new)

    def _record_transition(self, old: FlagState | None, new: FlagState) -> None:
        entry = {
            "at": rfc3339(time.time()), "enforce": new.enforce, "source": new.source,
            "reason": new.reason, "stale": new.stale, "expires_at": rfc3339(new.expires_at),
            "changed": old is None or old.enforce != new.enforce,
        }
        with self._lock:
            self.transitions.appendleft(entry)

    def record_decision(self, decision: Decision, path: str = "/login") -> None:
        """Add one decision to the timeline (called for every POST to a form's path)."""
        kind, verdict = _VERDICTS.get(decision.outcome, ("refused", decision.outcome))
        with self._lock:
            self._decision_count += 1
            self.decisions.appendleft({
                "n": self._decision_count, "at": rfc3339(time.time()), "route": path,
                "kind": kind,
                "verdict": verdict, "outcome": decision.outcome, "allow": decision.allow,
                "bypassed": decision.bypassed, "status": decision.status_code,
                "reason": decision.reason,
            })

    def snapshot(self) -> dict[str, Any]:
        """Everything the page shows besides the flag endpoint, as JSON."""
        runtime = self._runtime()
        with self._lock:
            transitions, decisions = list(self.transitions), list(self.decisions)
        return {
            "flag": flag_payload(runtime.state, poll=runtime.watcher),
            "vendor": self._vendor(),
            "fakes": {"status": None if self.page is None else
                      StatusPageControls(self.page).state(),
                      "verify": VerifyAPIControls(self.verify).state(),
                      "vendor": VendorScriptControls(self.script).state()},
            "transitions": transitions,
            "decisions": decisions,
            "counts": runtime.guard.counts(),
            "poll_interval": self.poll_interval,
            "forms": [{"name": form.name, "title": form.title, "path": form.path,
                       "policy": self.policies.get(form.name)} for form in self.forms],
            "settings": dict(self.settings),  # never the secret
            "fallback_missing": self.fallback_missing,
        }

    def _vendor(self) -> dict[str, Any]:
        config = self._runtime().config
        return {"name": config.vendor, "title": config.provider.title, "widget": config.widget,
                "evidence": "the status page" if self.stage is None else self.stage.evidence}

    def _runtime(self) -> FailOpen:
        if self.runtime is None:
            raise RuntimeError("DemoSite.start() first")
        return self.runtime


def _fallback_missing() -> str | None:
    """Why the fallback forms cannot be shown (``failopen[fallback]`` is missing), else None."""
    try:
        require_extra("showing the sign-up (fallback) and password-reset (closed) forms")
    except ConfigError as exc:
        return str(exc)
    return None


def _shown(state: FlagState) -> tuple[object, ...]:
    source = "status page" if state.source in ("watcher", "confirmed") else state.source
    return state.enforce, source, state.reason, state.stale, state.expires_at


def _page(site: DemoSite) -> FakeStatusPage:
    # The spec's vendor always has its status page; only a stage may have none.
    assert site.page is not None
    return site.page


def _regional(site: DemoSite) -> None:
    _page(site).set_region("eu-west-1", "major_outage")  # failover done: global stays operational


def _global_outage(site: DemoSite) -> None:
    # The whole platform: status page says so, verify calls fail, the script does not load.
    _page(site).set_global("major_outage")
    site.verify.set_fault("503")
    site.script.set_mode("http404")


def _status_errors(site: DemoSite) -> None:
    _page(site).set_fault("500")


def _vendor_down(site: DemoSite) -> None:
    site.script.set_mode("http404")


def _verify_down(site: DemoSite) -> None:
    site.verify.set_fault("503")


def _recovery(site: DemoSite) -> None:
    _page(site).set_fault(None)
    _page(site).set_global("operational")
    for region in REGIONS:
        _page(site).set_region(region, "operational")
    site.verify.set_fault(None)
    site.script.set_mode("ok")


#: The scene buttons: name -> (label, what it does to the fakes).
SCENES: Scenes = {
    "regional": ("Regional impairment (eu-west-1)", _regional),
    "global": ("Global outage", _global_outage),
    "status_errors": ("Status page erroring (HTTP 500)", _status_errors),
    "vendor_down": ("Vendor script down", _vendor_down),
    "verify_down": ("Verify API down", _verify_down),
    "recovery": ("Recovery", _recovery),
}

#: The override buttons: verb -> (label, the flag call an operator's command makes).
OVERRIDES: dict[str, tuple[str, Callable[[FailOpen], FlagState]]] = {
    "off": ("Override: off for 5 min", lambda runtime: runtime.flag.force_off(
        "demo page: operator turns enforcement off", ttl=OVERRIDE_OFF_TTL, set_by="demo page")),
    "on": ("Override: on", lambda runtime: runtime.flag.force_on(
        "demo page: operator forces enforcement on", set_by="demo page")),
    "auto": ("Override: auto", lambda runtime: runtime.flag.automatic(
        "demo page: back to the status page")),
}
