"""Configuration: one validated dataclass from ``FAILOPEN_*`` variables or by adapters.

Every field is checked when the Config is built, so a misconfiguration stops start-up with a message
that names the setting and says what to change, instead of surfacing on a request.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from failopen._config_fields import (
    DEFAULT_MAX_STALE_BYPASS,
    DEFAULT_RATE,
    ENV_PREFIX,
    KNOWN_IMPAIRED,
    SecretSetting,
    check_bypass_on,
    check_evidence,
    check_field,
    check_timing,
    default_backoff_max,
    env_name,
    field_values,
    store_password_apart,
    vendor_url,
)
from failopen._internal.defaults import DefaultText
from failopen._internal.networks import Network
from failopen._internal.paths import ProtectedPaths
from failopen.exceptions import ConfigError
from failopen.fallback.second_vendor import check_fallback_vendor, fallback_token_field
from failopen.fallback.settings import DEFAULT_MAX_CLIENTS, check_outage
from failopen.observe.audit_file import (
    DEFAULT_AUDIT_BACKUPS,
    DEFAULT_AUDIT_MAX_BYTES,
    check_audit_path,
)
from failopen.providers.base import Provider
from failopen.providers.registry import DEFAULT_VENDOR, PROVIDERS
from failopen.providers.settings import action_routes, vendor_presets
from failopen.providers.status_url import check_status_url
from failopen.providers.urls import check_url
from failopen.stores import key_prefix, shown_url

__all__ = [
    "Config", "KNOWN_IMPAIRED", "closest_setting", "default_backoff_max", "env_name",
    "setting_names",
]

#: Fields held as :class:`failopen.secret.Secret`: shown as ``***`` on every path.
_SECRETS = frozenset({"private_key", "admin_token", "store_password", "fallback_secret",
                      "fallback_private_key"})
# An admin token switches enforcement off: short enough to guess is a misconfiguration.
_MIN_ADMIN_TOKEN = 24


@dataclass(frozen=True)
class Config:
    """Everything failopen needs to know. Validated on construction; immutable afterwards."""

    # Interface B: the status page.
    status_url: str | None = None
    poll_interval: float = 30.0
    poll_jitter: float = 0.1
    status_timeout: float = 5.0
    status_max_bytes: int = 1_048_576
    global_component: str | None = None
    indicator_fallback: bool = False
    bypass_on: frozenset[str] = frozenset({"partial_outage", "major_outage"})
    open_after: int = 1
    close_after: int = 2
    stale_after: float | None = None
    backoff_max: float | None = None  # None: 10 x poll_interval, at most 300 s
    max_stale_bypass: float | None = None  # None: 900 s, or the stale limit if that is longer

    # The verify call. Secrets (here, store_password, admin_token) are failopen.Secret: a str
    # given is wrapped (blank: None); the code that uses one calls .reveal().
    verify_url: str | None = None
    private_key: SecretSetting = SecretSetting()
    public_key: str | None = None
    verify_timeout: float = 3.0
    require_verified: bool = False
    # Which captcha vendor answers the verify call (failopen.providers.registry); its adapter
    # presets what is left unset: the verify URL, the token field, the status page.
    vendor: str = DEFAULT_VENDOR
    # Answers that carry a score (reCAPTCHA v3, Enterprise): below it, a token is refused.
    min_score: float = 0.5
    # The action each protected route's tokens must have been minted for: (route, action).
    expected_actions: tuple[tuple[str, str], ...] = ()

    # What the adapters protect and where the token travels.
    protected_paths: tuple[str, ...] = ()
    # Views by name (``accounts:login``) or dotted path: read by adapters that resolve views.
    protected_views: tuple[str, ...] = ()
    protected_by_fields: bool = False  # form fields protect: `failopen check` wants no route
    protected_methods: frozenset[str] = frozenset({"POST"})
    token_field: str = DefaultText("enforcement-token")  # the vendor's field when left unset
    token_header: str = "X-Enforcement-Token"

    # Decisions.
    mode: Literal["enforce", "shadow"] = "enforce"
    audit: Literal["each", "summary"] = "summary"
    confirm_ttl: float = 10.0
    retry_after: int = 5
    store: str = "memory:"
    # A Redis store's password, kept out of ``store`` (a password in the URL is moved here).
    store_password: SecretSetting = SecretSetting()
    store_refresh: float = 1.0
    # Fleet mode (a redis:// store): key prefix, and the poller's lease (renewed at a third).
    redis_prefix: str = "failopen:"
    fleet_lease: float = 10.0

    # What the adapters serve besides the guard.
    max_body_bytes: int = 1_048_576
    # Where the browser snippet loads the vendor's client script from (the spec's vendor:
    # ``/v2/<key>/api.js``; another vendor's adapter adds that vendor's path): a preset per
    # vendor, its own origin.
    vendor_url: str | None = None
    # How the vendor's widget shows (visible, invisible, score): the adapter's first when unset.
    widget: str | None = None
    admin_token: SecretSetting = SecretSetting()
    override_endpoint: bool = False

    # The audit file: one JSON line per request admitted without a check
    # (failopen.observe.audit_file).
    audit_file: str | None = None
    audit_max_bytes: int = DEFAULT_AUDIT_MAX_BYTES
    audit_backups: int = DEFAULT_AUDIT_BACKUPS
    # Observability: Prometheus metrics (failopen.metrics).
    metrics: Literal["auto", "on", "off"] = "auto"
    # Outage evidence (issue 13): the status page always; the verify probe when opted in.
    evidence: frozenset[str] = frozenset({"status"})
    probe_interval: float | None = None  # None: the poll interval
    probe_open_after: int = 3
    # While enforcement is off (issue 20): each protected route's policy, the fallback
    # challenge, the outage rate limit and whose X-Forwarded-For counts.
    outage_policy: Literal["open", "fallback", "closed"] = "open"
    outage_policy_routes: tuple[tuple[str, str], ...] = ()  # (route, policy); a mapping given
    fallback_secret: SecretSetting = SecretSetting()
    fallback_cost: int = 100_000  # ALTCHA maxnumber; the solve-time benchmark will pick it
    fallback_ttl: float = 300.0
    outage_rate: str = DEFAULT_RATE  # "none": not counted
    outage_rate_max_clients: int = DEFAULT_MAX_CLIENTS  # in memory; past them, one shared window
    trusted_proxies: tuple[str, ...] = ()  # CIDRs, as ipaddress writes them

    # A second vendor as the fallback challenge (issue 29; failopen.fallback.second_vendor):
    # unset, a fallback route asks for the self-hosted ALTCHA proof of work.
    fallback_vendor: str | None = None
    fallback_private_key: SecretSetting = SecretSetting()
    fallback_public_key: str | None = None
    fallback_verify_url: str | None = None  # the vendor's preset when unset
    fallback_vendor_url: str | None = None  # its script origin (Provider.script_origin)

    def __post_init__(self) -> None:
        # Collections given in code may be any iterable; keep one canonical, hashable form.
        # Methods are upper-cased here too: "post" must protect POST, not silently nothing.
        for name, kind in (("bypass_on", frozenset), ("protected_methods", frozenset),
                           ("evidence", frozenset),
                           ("protected_paths", tuple), ("protected_views", tuple)):
            value = getattr(self, name)
            if isinstance(value, str) or not isinstance(value, Iterable):
                raise ConfigError(f"{env_name(name)}: expected a collection, got {value!r}")
            items = [v.upper() if name == "protected_methods" and isinstance(v, str) else v
                     for v in value]
            object.__setattr__(self, name, kind(items))
        for spec in dataclasses.fields(self):
            value = getattr(self, spec.name)
            check_field(spec.name, value)
        for name, value in vendor_presets(
                vendor=self.vendor, verify_url=self.verify_url,
                private_key=self.private_key is not None, public_key=self.public_key,
                token_field=self.token_field, status_url=self.status_url,
                global_component=self.global_component, evidence=self.evidence,
                vendor_url=self.vendor_url, widget=self.widget).items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "expected_actions", action_routes(
            self.expected_actions, paths=self.protected_paths, views=self.protected_views,
            provider=self.provider))
        object.__setattr__(self, "_paths", ProtectedPaths(self.protected_paths))
        if self.status_url is not None and not isinstance(self.status_url, DefaultText):
            object.__setattr__(
                self, "status_url", check_status_url(self.status_url, env_name("status_url"))
            )
        if self.verify_url is not None and not isinstance(self.verify_url, DefaultText):
            object.__setattr__(
                self, "verify_url", check_url(self.verify_url, setting=env_name("verify_url"))
            )
        if self.vendor_url is not None and not isinstance(self.vendor_url, DefaultText):
            object.__setattr__(self, "vendor_url", vendor_url(self.vendor_url))
        if self.audit_file is not None:
            # Here, not on the first bypass: a path nobody can write fails the start-up, not
            # the one moment when the trail matters.
            object.__setattr__(self, "audit_file",
                               check_audit_path(self.audit_file, env_name("audit_file")))
        self._take_store_password()
        token = self.admin_token
        if token is not None and len(token.reveal().strip()) < _MIN_ADMIN_TOKEN:
            # Never echo the value: it is a credential.
            raise ConfigError(
                f"FAILOPEN_ADMIN_TOKEN: must be at least {_MIN_ADMIN_TOKEN} characters; "
                "generate one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
            )
        for name in ("public_key", "global_component"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(f"{env_name(name)}: expected a non-empty string")
        component = self.global_component
        if component is not None and component != component.strip():
            # Ids and names are matched exactly: a stray newline from a secret file would match
            # nothing, and every reading would fail.
            raise ConfigError(
                f"FAILOPEN_GLOBAL_COMPONENT: {component!r} has leading or trailing whitespace; "
                "give the component's id or exact name (`failopen status --components` lists them)"
            )
        if self.verify_url is not None and not self.private_key:
            raise ConfigError(
                "FAILOPEN_PRIVATE_KEY: required when FAILOPEN_VERIFY_URL is set "
                "(the verify call authenticates with the private key)"
            )
        check_timing(self)
        check_bypass_on(self.bypass_on, indicator_fallback=self.indicator_fallback)

        check_evidence(self.evidence, status_url=self.status_url, verify_url=self.verify_url)
        for name, value in check_outage(
                policy=self.outage_policy, routes=self.outage_policy_routes,
                paths=self.protected_paths, views=self.protected_views,
                secret=self.fallback_secret, rate=self.outage_rate, proxies=self.trusted_proxies,
                store=self.store,
                second_vendor=self.fallback_vendor is not None).items():
            object.__setattr__(self, name, value)
        for name, value in check_fallback_vendor(
                vendor=self.fallback_vendor, first=self.provider,
                first_token_field=self.token_field, private_key=self.fallback_private_key,
                public_key=self.fallback_public_key, verify_url=self.fallback_verify_url,
                vendor_url=self.fallback_vendor_url, fallback_secret=self.fallback_secret).items():
            object.__setattr__(self, name, value)

    def _take_store_password(self) -> None:
        """Move a password out of the store URL into ``store_password``, where every path that
        shows the Config masks it (``store`` then names the server only)."""
        stripped, password = store_password_apart(self.store, self.store_password)
        key_prefix(self.store, self.redis_prefix)  # a cluster's hash tag: refused at start-up
        if password is not None:
            object.__setattr__(self, "store", stripped)
            object.__setattr__(self, "store_password", password)

    def outage_policy_for(self, route: str | None) -> str:
        """What ``route`` (a protected path or view, as spelled in the settings) does while
        enforcement is off: its own policy, else ``FAILOPEN_OUTAGE_POLICY``."""
        return self.__dict__["_policies"].get(route, self.outage_policy)  # type: ignore[no-any-return]

    @property
    def sees_no_outage(self) -> bool:
        """True when nothing can show an outage: no status page, and the probe not alone
        (overrides only; every adapter says so at start-up)."""
        return self.status_url is None and self.evidence != frozenset({"probe"})

    @property
    def provider(self) -> Provider:
        """The adapter of ``FAILOPEN_VENDOR``: how its verify call and answers look."""
        return PROVIDERS[self.vendor]

    @property
    def uses_fallback(self) -> bool:
        """True when any route, or the default, asks for the fallback challenge."""
        return self.outage_policy == "fallback" or any(
            policy == "fallback" for _route, policy in self.outage_policy_routes)

    @property
    def fallback_token_field(self) -> str:
        """Where a ``fallback`` route's answer travels in a body: the second vendor's widget
        field (``FAILOPEN_FALLBACK_VENDOR``), else ALTCHA's (``altcha``)."""
        return fallback_token_field(self.fallback_vendor)

    @property
    def trusted_networks(self) -> tuple[Network, ...]:
        """``FAILOPEN_TRUSTED_PROXIES`` as ``ipaddress`` networks (for ``client_address``)."""
        return self.__dict__["_proxies"]  # type: ignore[no-any-return]

    @property
    def probe(self) -> bool:
        """True when the verify probe is outage evidence (``FAILOPEN_EVIDENCE=status,probe``)."""
        return "probe" in self.evidence

    @property
    def probe_interval_seconds(self) -> float:
        """Seconds between verify probes (default: the poll interval)."""
        return self.probe_interval if self.probe_interval is not None else self.poll_interval

    @property
    def stale_after_seconds(self) -> float:
        """How old the last good status reading may be before the state is marked stale."""
        return self.stale_after if self.stale_after is not None else 3 * self.poll_interval

    @property
    def backoff_max_seconds(self) -> float:
        """The longest wait between polls while the status page fails (and enforcement is on)."""
        return self.backoff_max if self.backoff_max is not None else default_backoff_max(
            self.poll_interval
        )

    @property
    def max_stale_bypass_seconds(self) -> float:
        """How long a status-driven bypass may go on without a good reading before it ends."""
        if self.max_stale_bypass is not None:
            return self.max_stale_bypass
        # A site polling rarely on purpose keeps working: its bypass ends once it is stale.
        return max(DEFAULT_MAX_STALE_BYPASS, self.stale_after_seconds)

    def is_protected(self, method: str, path: str) -> bool:
        """True when a request with this method and path must carry an enforcement token.

        Any case of the method counts (servers pass ``post`` through; frameworks route it as
        POST), and HEAD counts wherever GET does (frameworks run the GET view for it).
        """
        methods = self.protected_methods
        if method not in methods:
            method = method.upper()
            if method not in methods and not (method == "HEAD" and "GET" in methods):
                return False
        return self.protects_path(path)

    def protects_path(self, path: str) -> bool:
        """True when ``path``, in any spelling a router may treat as the same, is protected.

        Beyond the prefixes themselves: ``/signup`` when ``/signup/`` is listed; paths with
        ``//`` or dot segments, which some routers and proxies normalise; and paths a router may
        cut short or clean up: Starlette's route regex ends in ``$``, which also matches before a
        final ``\\n``, so ``/signup\\n`` reaches ``Route("/signup")``; and ``/SIGNUP/``, which a
        ``(?i)`` route or a CMS's case-insensitive slug serves. Only ever adds protection.
        """
        return self.__dict__["_paths"].cover(path)  # type: ignore[no-any-return]

    def replace(self, **changes: Any) -> Config:
        """A copy with some fields changed, validated again."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Config:
        """Build from ``FAILOPEN_*`` variables; keyword arguments win over the environment."""
        return cls.from_mapping({}, environ=environ, **overrides)

    @classmethod
    def from_mapping(
        cls,
        settings: Mapping[str, Any],
        *,
        environ: Mapping[str, str] | None = None,
        **overrides: Any,
    ) -> Config:
        """Build from a mapping keyed by upper-case field names (Django's ``FAILOPEN`` setting).

        Precedence: keyword overrides, then ``settings``, then ``FAILOPEN_*`` variables, then the
        defaults. Unknown keys are an error that suggests the closest known one, and so is a key
        in lower case: a typo cannot silently drop a setting.
        """
        environ = os.environ if environ is None else environ
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**field_values(names, settings, environ, overrides, closest=closest_setting))

    def __repr__(self) -> str:
        # The dataclass repr, but the store URL masked: it may carry a password.
        shown = []
        for spec in dataclasses.fields(self):
            if spec.repr:
                value = getattr(self, spec.name)
                if spec.name == "store":
                    value = shown_url(value, password=self.store_password is not None)
                shown.append(f"{spec.name}={value!r}")
        return f"Config({', '.join(shown)})"

    def describe(self) -> dict[str, Any]:
        """The settings as JSON-ready values, secrets masked (for logs and diagnostics)."""
        out: dict[str, Any] = {}
        for spec in dataclasses.fields(self):
            value = getattr(self, spec.name)
            if spec.name in _SECRETS:
                value = "***" if value else None
            elif spec.name == "store":
                value = shown_url(value, password=self.store_password is not None)
            elif isinstance(value, frozenset):
                value = sorted(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[spec.name] = value
        return out


def setting_names() -> list[str]:
    """Every settings key ``Config.from_mapping`` knows: the field names in upper case."""
    return sorted(spec.name.upper() for spec in dataclasses.fields(Config))


def closest_setting(name: str) -> str | None:
    """The known settings key a misspelled ``name`` most likely meant (any case, with or
    without the ``FAILOPEN_`` prefix), or None when nothing is close."""
    wanted = name.upper().removeprefix(ENV_PREFIX)
    close = difflib.get_close_matches(wanted, setting_names(), n=1, cutoff=0.75)
    return close[0] if close else None
