"""Fakes of the real status pages behind the vendor presets: Cloudflare's and hCaptcha's.

Both are :class:`~failopen.testing.FakeStatusPage` built from a list of components, so they serve
the same two documents, take the same faults (``set_fault``), count and keep requests the same way,
and serve in-process (``transport()``) or on loopback (``serve()``). Their ``global_id`` is the
component the preset reads, so ``missing_global`` removes it and ``set_global`` sets it.

* :class:`FakeCloudflareStatusPage`: www.cloudflarestatus.com in its real shape and size: the
  group ``Cloudflare Sites and Services`` with 30 services (Turnstile among them), and some 330
  data centres (PoPs) in seven regional groups; about 135 kB of components.json. What is real and
  what is generated: :mod:`failopen.testing._cloudflare_pops`.
* :class:`FakeHCaptchaStatusPage`: www.hcaptchastatus.com: ``Captcha API`` (the component the
  preset names) and the few other components hCaptcha's incidents name; no groups. The ids are
  made up (the real ones are not known here).

::

    page = FakeCloudflareStatusPage()
    page.set_pop("AMS", "major_outage")          # one data centre: Turnstile is still up
    page.set_region_group("Europe", "major_outage")
    page.set_indicator("major")                  # the page as a whole: not Turnstile
    page.set_turnstile("major_outage")           # the outage failopen bypasses on
    client = StatusClient(page.URL, global_component=page.TURNSTILE_ID,
                          transport=page.transport())
"""

from __future__ import annotations

from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.testing._cloudflare_pops import (
    REGIONS,
    SERVICES,
    SERVICES_GROUP,
    TURNSTILE_ID,
    cloudflare_layout,
)
from failopen.testing._status_layout import PageComponent, PageInfo
from failopen.testing.status_page import FakeStatusPage

__all__ = ["SHAPES", "FakeCloudflareStatusPage", "FakeHCaptchaStatusPage"]


class FakeCloudflareStatusPage(FakeStatusPage):
    """Cloudflare's status page: Turnstile in ``Cloudflare Sites and Services``, ~330 PoPs.

    Everything starts ``operational`` and the indicator ``none`` (the real page's is nearly always
    ``minor``, some PoP being re-routed: :meth:`set_indicator` or :meth:`set_pop` shows that).
    """

    URL = "https://www.cloudflarestatus.com"
    PAGE_ID = "yh6f0r4529hb"
    TURNSTILE_ID = TURNSTILE_ID
    SERVICES_GROUP_ID = SERVICES_GROUP[0]
    REGIONS = tuple(REGIONS)
    #: The component that decides, as ``failopen emulate status --shape cloudflare`` says it.
    DECIDES = "Turnstile, m4jywscr0n0k, what FAILOPEN_VENDOR=turnstile reads"

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK) -> None:
        layout, pop_ids, group_ids = cloudflare_layout()
        super().__init__(components=layout, global_id=TURNSTILE_ID, clock=clock,
                         page=PageInfo(self.PAGE_ID, "Cloudflare", self.URL))
        #: PoP component ids by IATA code (``"AMS"`` -> ``"57ctn3f2qsyj"``).
        self.pop_ids = pop_ids
        #: Regional group ids by region (``"Europe"`` -> ``"zqxhg7y54vy8"``).
        self.region_group_ids = group_ids
        #: Service component ids by name (``"Cloudflare APIs"`` -> ``"g4tb35rs9yw7"``).
        self.service_ids = dict(SERVICES)

    def set_turnstile(self, status: str) -> None:
        """Set the Turnstile component's status (the one the turnstile preset reads)."""
        self.set_global(status)

    def set_pop(self, pop: str, status: str) -> None:
        """Set one data centre's status, by IATA code (``"AMS"``) or component id."""
        cid = self.pop_ids.get(pop.upper(), pop)
        if cid not in self.pop_ids.values():
            raise KeyError(f"no PoP {pop!r}; give an IATA code such as 'AMS' or a PoP's id")
        self.set_component(cid, status)

    def set_region_group(self, region: str, status: str) -> None:
        """Set every PoP of a regional group (``"Europe"``, or the group's id) to ``status``."""
        gid = self.region_group_ids.get(region, region)
        if gid not in self.region_group_ids.values():
            raise KeyError(f"no region {region!r}; the page has {', '.join(self.REGIONS)}")
        self.set_group(gid, status)


_HCAPTCHA_COMPONENTS = (
    ("Captcha API", "r7k2m9xq4t1v"),
    ("API loads", "b3n8w5zc0p6h"),
    ("Enterprise: Analytics queries", "h5t0q2ld9s3m"),
    ("Passkey support", "v1c6j8fy2k7n"),
)


class FakeHCaptchaStatusPage(FakeStatusPage):
    """hCaptcha's status page: ``Captcha API`` and its neighbours, no groups, made-up ids."""

    URL = "https://www.hcaptchastatus.com"
    PAGE_ID = "q2w8hcstat01"
    CAPTCHA_API_ID = _HCAPTCHA_COMPONENTS[0][1]
    #: The component that decides, as ``failopen emulate status --shape hcaptcha`` says it.
    DECIDES = "Captcha API, what FAILOPEN_VENDOR=hcaptcha reads"

    def __init__(self, *, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(
            components=[PageComponent(cid, name) for name, cid in _HCAPTCHA_COMPONENTS],
            global_id=self.CAPTCHA_API_ID, clock=clock,
            page=PageInfo(self.PAGE_ID, "hCaptcha", self.URL))
        #: Component ids by name (``"Captcha API"`` -> :attr:`CAPTCHA_API_ID`).
        self.component_ids = dict(_HCAPTCHA_COMPONENTS)

    def set_captcha_api(self, status: str) -> None:
        """Set ``Captcha API``'s status (the component the hcaptcha preset names)."""
        self.set_global(status)


#: ``failopen emulate status --shape NAME``: the page a vendor preset reads, by vendor.
SHAPES: dict[str, type[FakeCloudflareStatusPage | FakeHCaptchaStatusPage]] = {
    "cloudflare": FakeCloudflareStatusPage, "hcaptcha": FakeHCaptchaStatusPage,
}
