"""``failopen demo --web --vendor NAME``: another vendor's fakes behind the same page.

The terminal story's kit of that vendor (:mod:`failopen.cli.demo_vendors`, chosen by name) brings
its verify fake, the fake of its status page where it publishes one a machine can read (else the
verify probe is the evidence, on the kit's demo-fast interval) and the Config fields pointing
failopen at them. A stage adds the fake of the vendor's browser script (so the visitor sees the
vendor's own widget flow through failopen.js and its adapter) and the scene buttons told in the
kit's terms. The spec's vendor has no stage: it keeps the demo it always had
(:data:`~failopen.cli.demo_web._site.SCENES`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from failopen.cli.demo_vendors import DEMO_KITS, PageKit, demo_kit
from failopen.providers.registry import DEFAULT_VENDOR, provider_named
from failopen.testing.browser_scripts import BrowserScriptFake, fake_browser_script
from failopen.testing.providers import CaptchaVerifyFake
from failopen.testing.status_page import FakeStatusPage

__all__ = ["WIDGET", "Scenes", "VendorStage", "stage_for"]

#: The widget every vendor has: Turnstile's managed widget and Friendly Captcha's run by
#: themselves, hCaptcha and reCAPTCHA (v2, Enterprise) show a checkbox to tick.
WIDGET = "visible"

#: Scene buttons: name -> (label, what it does to the fakes). The action is given the DemoSite
#: (Any here: the site's module imports this one, never the reverse); a stage's own scenes act on
#: the stage's fakes and ignore it.
Scenes = dict[str, tuple[str, Callable[[Any], None]]]


class VendorStage:
    """One vendor's fakes in the web demo: the kit's, its browser script, and its scenes."""

    def __init__(self, vendor: str) -> None:
        self.kit = demo_kit(vendor)
        verify = self.kit.verify
        if not isinstance(verify, CaptchaVerifyFake):  # every kit but the spec's has one
            raise TypeError(f"{vendor}: the web demo needs a captcha vendor's verify fake")
        self.vendor = vendor
        self.title = provider_named(vendor).title
        self.verify: CaptchaVerifyFake = verify
        self.page: FakeStatusPage | None = self.kit.page
        # Its tokens go to this verify fake, which accepts each once, as the vendor does.
        self.script: BrowserScriptFake = fake_browser_script(vendor, verify_api=verify)

    @property
    def evidence(self) -> str:
        """What turns enforcement off: the vendor's status page, or the verify probe."""
        return self.kit.evidence

    def settings(self) -> dict[str, Any]:
        """The Config fields of the served fakes (the kit's), the script's origin, the widget."""
        found = dict(self.kit.settings())
        # The page shows reCAPTCHA's v2 checkbox, whose tokens name no action: the terminal
        # story's v3 expectation for /login would refuse every one of them.
        found.pop("expected_actions", None)
        found.update(vendor_url=self.script.url, widget=WIDGET)
        return found

    def startup_lines(self) -> list[str]:
        """What the command prints about the vendor and its fakes, after the URL to open."""
        verify, script = self.verify, self.script
        lines = [f"  vendor: {self.title} (FAILOPEN_VENDOR={self.vendor}, FAILOPEN_WIDGET="
                 f"{WIDGET}): its widget through failopen.js; outage evidence: {self.evidence}"]
        if self.page is not None:
            lines += [f"  fakes: status page {self.page.url}, verify API {verify.url}, browser "
                      f"script {script.script_url}",
                      f"  they take `failopen emulate status --url {self.page.url} "
                      "--set global=major_outage` too"]
        else:
            lines += [f"  fakes: verify API {verify.url}, browser script {script.script_url} "
                      f"(no status page: {self.title} publishes none a machine can read)",
                      f"  they take `failopen emulate verify --url {verify.url} --set fault=503` "
                      "too"]
        return lines

    def scenes(self) -> Scenes:
        """The buttons, in the terms of what is evidence for this vendor."""
        kit, verify, script = self.kit, self.verify, self.script

        def vendor_down(site: object) -> None:
            script.set_mode("http404")

        if not isinstance(kit, PageKit):
            # The verify probe is the only evidence: the vendor down for everyone is its verify
            # API failing (the probe's calls and the requests' alike), its script with it.
            def down(site: object) -> None:
                verify.set_fault("503")
                script.set_mode("http404")

            def back(site: object) -> None:
                verify.set_fault(None)
                script.set_mode("ok")

            return {
                "global": (f"Global outage ({self.title} down for everyone)", down),
                "vendor_down": ("Vendor script down", vendor_down),
                "recovery": ("Recovery", back),
            }
        page = kit.page

        def regional(site: object) -> None:
            kit.regional()  # the rest of the page, never the component that decides

        def global_outage(site: object) -> None:
            kit.set_captcha("major_outage")
            verify.set_fault("503")
            script.set_mode("http404")

        def status_errors(site: object) -> None:
            page.set_fault("500")

        def verify_down(site: object) -> None:
            verify.set_fault("503")

        def recovery(site: object) -> None:
            page.set_fault(None)
            kit.set_captcha("operational")
            kit.clear_regional()
            verify.set_fault(None)
            script.set_mode("ok")

        return {
            "regional": (kit.regional_label, regional),
            "global": (f"Global outage ({kit.label})", global_outage),
            "status_errors": ("Status page erroring (HTTP 500)", status_errors),
            "vendor_down": ("Vendor script down", vendor_down),
            "verify_down": ("Verify API down", verify_down),
            "recovery": ("Recovery", recovery),
        }


def stage_for(vendor: str) -> VendorStage | None:
    """The stage of ``vendor``, or None for the spec's vendor (the demo as it always was);
    ValueError for a name no demo kit has."""
    if vendor not in DEMO_KITS:
        raise ValueError(f"no web demo for vendor {vendor!r}; choose from "
                         f"{', '.join(DEMO_KITS)}")
    return None if vendor == DEFAULT_VENDOR else VendorStage(vendor)
