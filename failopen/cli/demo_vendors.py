"""``failopen demo --vendor NAME``: each vendor's demo kit, chosen by the vendor's name.

A kit holds only what differs between vendors: which fakes stand in for the vendor, what counts
as "regional" and "global" on its status page, and the tokens its users send. The story itself
(:mod:`failopen.cli.demo`, :mod:`failopen.cli.demo_scenes`) is the same for every vendor.

* ``enforcement`` (the spec's vendor): the spec's status page (regions and one global component)
  and verify API; its story is the one ``failopen demo`` has always told.
* ``turnstile``, ``hcaptcha``: the vendor's verify API and the fake of its real status page,
  where only the preset component decides (Turnstile's ``m4jywscr0n0k``, hCaptcha's
  ``Captcha API``): the rest of the page in an outage is the "regional" scene.
* ``recaptcha``, ``recaptcha-enterprise``, ``friendly-captcha``: no status page a machine can
  read; the verify probe is the only evidence (:mod:`failopen.cli.demo_probe`).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

from failopen.cli.demo_probe import FriendlyCaptchaKit, RecaptchaEnterpriseKit, RecaptchaKit
from failopen.cli.demo_scenes import DemoKit, Scene, World, override_scene, play_fallback
from failopen.config import Config
from failopen.providers.status_documents import StatusReport
from failopen.runtime import FailOpen
from failopen.testing.providers import CaptchaVerifyFake, fake_verify_api
from failopen.testing.status_page import FakeStatusPage
from failopen.testing.vendor_status_pages import FakeCloudflareStatusPage, FakeHCaptchaStatusPage
from failopen.testing.verify_api import FakeVerifyAPI

__all__ = ["DEMO_KITS", "DEMO_VENDORS", "PageKit", "demo_kit"]


class PageKit(DemoKit):
    """A vendor whose status page failopen reads: healthy, regional, global outage, fallback,
    page errors, recovery, verify down, override."""

    page: FakeStatusPage
    healthy_title: ClassVar[str]
    regional_title: ClassVar[str]
    regional_note: ClassVar[str] = ""
    #: The web demo's button for :meth:`regional` (``failopen demo --web --vendor``).
    regional_label: ClassVar[str] = "Regional impairment"
    outage_title: ClassVar[str]
    verify_down_title: ClassVar[str]
    verify_down_note: ClassVar[str]

    @abstractmethod
    def set_captcha(self, status: str) -> None:
        """Set the component that decides."""

    @abstractmethod
    def regional(self) -> None:
        """Put what is regional on this page (never the deciding component) in an outage."""

    @abstractmethod
    def clear_regional(self) -> None:
        """Undo :meth:`regional`."""

    def healthy(self, world: World) -> None:
        """Every component operational, the page and the verify API answering."""
        self.page.set_fault(None)
        self.set_captcha("operational")
        self.clear_regional()
        self.verify.set_fault(None)

    def global_outage(self, world: World) -> None:
        """The deciding component in an outage, and the verify API down with it."""
        self.set_captcha("major_outage")
        self.verify.set_fault("503")

    def scenes(self) -> tuple[Scene, ...]:
        """The spec's story, told in this page's terms."""

        def regional(world: World) -> None:
            self.regional()  # failover done: the deciding component stays operational

        def status_errors(world: World) -> None:
            self.page.set_fault("500")

        def verify_down(world: World) -> None:
            self.verify.set_fault("503")  # the status page still says operational

        return (
            Scene(self.healthy_title, self.healthy, True),
            Scene(self.regional_title, regional, True, note=self.regional_note),
            Scene(self.outage_title, self.global_outage, False),
            Scene("sign-up during the outage with `fallback`; password reset `closed`",
                  self.global_outage, False, play=play_fallback),
            Scene(
                "status page erroring (HTTP 500): the last good reading stands", status_errors,
                False,
                note=f"an error is no evidence either way: the last good reading "
                     f"({self.label}=major_outage) stands;\n    had it been operational, "
                     "enforcement would go on",
            ),
            Scene("recovery: everything operational again", self.healthy, True),
            Scene(self.verify_down_title, verify_down, True, note=self.verify_down_note),
            override_scene(self.healthy),
        )


class _SpecKit(PageKit):
    """The spec's vendor: a page of regions and one global component, the spec's verify API."""

    vendor = "enforcement"
    states_expectation = False  # its output is pinned as it was before --vendor
    verify: FakeVerifyAPI
    healthy_title = "healthy: every component operational"
    regional_title = "regional impairment: eu-west-1 down, failover complete"
    outage_title = "global outage: the platform is down, verify calls fail"
    verify_down_title = ("verify API down, status page operational: cannot verify now, never a "
                         "bypass")
    verify_down_note = ("the verify call fails, so the guard asks the status page: operational, "
                        "so no outage is confirmed")
    _REGIONS = ("us-east-1", "eu-west-1")

    def __init__(self) -> None:
        self.page = FakeStatusPage(regions=self._REGIONS)
        self.verify = FakeVerifyAPI(private_key="demo-private-key")

    def settings(self) -> dict[str, Any]:
        """The spec's vendor is the default: its page, its verify URL and a key."""
        return {"status_url": self.page.url, "verify_url": self.verify.verify_url,
                "private_key": self.verify.private_key}

    def header(self, config: Config, runtime: FailOpen) -> list[str]:
        """Where the fakes answer, and how often the page is read."""
        return [f"status page {self.page.url}  verify {self.verify.url}",
                f"polling every {config.poll_interval:g}s; bypass on "
                f"{', '.join(sorted(config.bypass_on))}"]

    def tokens(self) -> tuple[tuple[str, str | None], ...]:
        """A token is verified once: each scene's users take a fresh challenge (one solves it,
        one fails it), so the bad token reads as unsolved, not as a replay of the last scene's."""
        return (("valid token", self.verify.issue_token()),
                ("bad token", self.verify.issue_token(solved=False, verified=False)),
                ("no token", None))

    def set_captcha(self, status: str) -> None:
        """The global component."""
        self.page.set_global(status)

    def regional(self) -> None:
        """One region down."""
        self.page.set_region("eu-west-1", "major_outage")

    def clear_regional(self) -> None:
        """Every region up."""
        for region in self._REGIONS:
            self.page.set_region(region, "operational")

    def impaired(self, report: StatusReport) -> str:
        """The regions not operational, by label."""
        regions = ",".join(f"{c.description}={c.status}" for c in report.impaired_regions())
        return f"impaired regions: {regions}" if regions else ""


class _VendorPageKit(PageKit):
    """A vendor with a real status page: its preset component decides, nothing else does."""

    verify: CaptchaVerifyFake

    def __init__(self, page: FakeStatusPage) -> None:
        self.page = page
        self.verify = fake_verify_api(self.vendor)

    def settings(self) -> dict[str, Any]:
        """The vendor, its served page and verify API; the preset names the component."""
        return {"vendor": self.vendor, "status_url": self.page.url,
                "verify_url": self.verify.verify_url, "private_key": self.verify.private_key,
                "public_key": self.verify.public_key}

    def header(self, config: Config, runtime: FailOpen) -> list[str]:
        """The vendor, its fakes and the component watched."""
        preset = config.provider.status
        about = f" ({preset.about})" if preset is not None else ""
        components = len(self.page.components_document()["components"])
        return [
            f"vendor {config.provider.title} (FAILOPEN_VENDOR={self.vendor}): its verify API "
            f"at {self.verify.url}",
            f"status page {self.page.url}: the test kit's {type(self.page).__name__}, "
            f"{components} components",
            f"watching {config.global_component}{about}: nothing else on the page decides",
            f"polling every {config.poll_interval:g}s; bypass on "
            f"{', '.join(sorted(config.bypass_on))}",
        ]

    def tokens(self) -> tuple[tuple[str, str | None], ...]:
        """A freshly solved token, one the vendor never issued, none."""
        return (("valid token", self.verify.issue_token()), ("bad token", self.verify.BAD),
                ("no token", None))

    def impaired(self, report: StatusReport) -> str:
        """The other components not operational: a count and the first two names (Cloudflare's
        page has hundreds)."""
        names = [c.name for c in report.impaired_regions()]
        if not names:
            return ""
        more = f" and {len(names) - 2} more" if len(names) > 2 else ""
        return f"not operational elsewhere on the page: {', '.join(names[:2])}{more}"


class _TurnstileKit(_VendorPageKit):
    """Cloudflare's page: ~330 data centres in regional groups, Turnstile among 30 services."""

    vendor = "turnstile"
    label = "Turnstile"
    page: FakeCloudflareStatusPage
    healthy_title = "healthy: Turnstile and every data centre operational"
    regional_title = ("regional: data centre SIN and the Europe group in an outage, the page's "
                      "indicator major; Turnstile operational")
    regional_note = ("Cloudflare's page as a whole reads major, but only the Turnstile component "
                     "decides: nothing is bypassed")
    regional_label = "Regional: data centre SIN and Europe down (Turnstile up)"
    outage_title = "global outage: Turnstile in major_outage, verify calls fail"
    verify_down_title = ("verify API down, Turnstile operational on the page: cannot verify now, "
                         "never a bypass")
    verify_down_note = ("the verify call fails, so the guard asks the status page: Turnstile "
                        "reads operational, so no outage is confirmed")

    def __init__(self) -> None:
        super().__init__(FakeCloudflareStatusPage())

    def set_captcha(self, status: str) -> None:
        """The Turnstile component."""
        self.page.set_turnstile(status)

    def regional(self) -> None:
        """A data centre, a regional group and the page's overall indicator."""
        self.page.set_pop("SIN", "major_outage")
        self.page.set_region_group("Europe", "major_outage")
        self.page.set_indicator("major")

    def clear_regional(self) -> None:
        """All of them back."""
        self.page.set_pop("SIN", "operational")
        self.page.set_region_group("Europe", "operational")
        self.page.set_indicator(None)


class _HCaptchaKit(_VendorPageKit):
    """hCaptcha's page: ``Captcha API`` and a few other components, no regions."""

    vendor = "hcaptcha"
    label = "Captcha API"
    page: FakeHCaptchaStatusPage
    healthy_title = "healthy: Captcha API and every other component operational"
    regional_title = "another component down: API loads in major_outage; Captcha API operational"
    regional_note = ("hCaptcha's page has no regions; only Captcha API decides, so nothing is "
                     "bypassed")
    regional_label = "Another component down: API loads (Captcha API up)"
    outage_title = "global outage: Captcha API in major_outage, verify calls fail"
    verify_down_title = ("verify API down, Captcha API operational on the page: cannot verify "
                         "now, never a bypass")
    verify_down_note = ("the verify call fails, so the guard asks the status page: Captcha API "
                        "reads operational, so no outage is confirmed")

    def __init__(self) -> None:
        super().__init__(FakeHCaptchaStatusPage())

    def set_captcha(self, status: str) -> None:
        """The Captcha API component."""
        self.page.set_captcha_api(status)

    def regional(self) -> None:
        """Another component of the page."""
        self.page.set_component("API loads", "major_outage")

    def clear_regional(self) -> None:
        """Back."""
        self.page.set_component("API loads", "operational")


#: Each vendor's demo kit, by the name ``--vendor`` and ``FAILOPEN_VENDOR`` take.
DEMO_KITS: dict[str, type[DemoKit]] = {
    kit.vendor: kit for kit in (_SpecKit, _TurnstileKit, _HCaptchaKit, RecaptchaKit,
                                RecaptchaEnterpriseKit, FriendlyCaptchaKit)
}
#: The names ``--vendor`` takes, the spec's vendor first.
DEMO_VENDORS = tuple(DEMO_KITS)


def demo_kit(vendor: str) -> DemoKit:
    """A fresh kit for ``vendor`` (its fakes not yet served); ValueError for an unknown name."""
    kit = DEMO_KITS.get(vendor)
    if kit is None:
        raise ValueError(f"no demo for vendor {vendor!r}; choose from {', '.join(DEMO_KITS)}")
    return kit()
