"""The Cloudflare- and hCaptcha-shaped status pages, read the way the vendor presets read them.

Only the preset's component decides: a data centre, a whole region, another service or the
page's overall indicator never does, and a page that loses the component is an error, never a
bypass.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from failopen import Config
from failopen.cli.command import main
from failopen.exceptions import GlobalComponentError
from failopen.providers.status import StatusClient, parse_components
from failopen.runtime import FailOpen
from failopen.testing import (
    FakeCloudflareStatusPage,
    FakeHCaptchaStatusPage,
    FakeRequest,
    FakeStatusPage,
    PageComponent,
)

COMPONENTS = "/api/v2/components.json"
FAILOPEN = Path(sys.executable).with_name("failopen")


def get(page: FakeStatusPage, path: str = COMPONENTS) -> bytes:
    reply = page.handle(FakeRequest("GET", path, {}, {}, b""))
    assert reply.status == 200 and isinstance(reply.body, bytes)
    return reply.body


@pytest.fixture
def cloudflare() -> FakeCloudflareStatusPage:
    return FakeCloudflareStatusPage()


@pytest.fixture
def turnstile(cloudflare: FakeCloudflareStatusPage) -> Iterator[StatusClient]:
    """A client configured as the turnstile preset configures it (the component by id)."""
    with StatusClient(cloudflare.URL, global_component="m4jywscr0n0k",
                      transport=cloudflare.transport()) as client:
        yield client


@pytest.fixture
def hcaptcha() -> FakeHCaptchaStatusPage:
    return FakeHCaptchaStatusPage()


def captcha_api(page: FakeHCaptchaStatusPage) -> StatusClient:
    """A client configured as the hcaptcha preset configures it (the component by name)."""
    return StatusClient(page.URL, global_component="Captcha API", transport=page.transport())


# --- Cloudflare: the shape ---------------------------------------------------------------------


def test_the_cloudflare_page_has_the_real_shape_and_size(
    cloudflare: FakeCloudflareStatusPage,
) -> None:
    components = json.loads(get(cloudflare))["components"]
    by_id = {c["id"]: c for c in components}
    groups = [c for c in components if c["group"]]
    assert len(groups) == 8
    regional = [g for g in groups if g["id"] != "1km35smx8p41"]
    assert {g["name"] for g in regional} == {
        "Africa", "Asia", "Europe", "Latin America & the Caribbean", "Middle East",
        "North America", "Oceania"}
    pops = [by_id[m] for g in regional for m in g["components"]]
    assert 320 <= len(pops) <= 340
    services = by_id["1km35smx8p41"]
    assert services["name"] == "Cloudflare Sites and Services"
    assert 25 <= len(services["components"]) <= 35
    assert "m4jywscr0n0k" in services["components"]
    turnstile = by_id["m4jywscr0n0k"]
    assert (turnstile["name"], turnstile["group_id"], turnstile["group"]) == (
        "Turnstile", "1km35smx8p41", False)
    assert turnstile["description"] is None
    amsterdam = by_id["57ctn3f2qsyj"]
    assert amsterdam["name"] == "Amsterdam, Netherlands - (AMS)"
    assert (amsterdam["group_id"], amsterdam["position"]) == ("zqxhg7y54vy8", 1)
    assert set(amsterdam) == {
        "id", "name", "status", "created_at", "updated_at", "position", "description",
        "showcase", "start_date", "group_id", "page_id", "group", "only_show_if_degraded"}
    assert all(p["description"] is None and p["page_id"] == "yh6f0r4529hb" for p in pops)
    assert all(p["name"].endswith(f"- ({code})") for code, p in
               ((code, by_id[cid]) for code, cid in cloudflare.pop_ids.items()))
    assert len({c["id"] for c in components}) == len(components)
    again = FakeCloudflareStatusPage().components_document()["components"]
    assert [(c["id"], c["name"]) for c in again] == [(c["id"], c["name"]) for c in components], \
        "the generated PoPs are the same every time"


def test_the_cloudflare_document_is_well_under_the_size_cap(
    cloudflare: FakeCloudflareStatusPage, capsys: pytest.CaptureFixture[str]
) -> None:
    body = get(cloudflare)
    cap = Config().status_max_bytes
    started = time.perf_counter()
    report = parse_components(body, fetched_at=0.0, global_component="m4jywscr0n0k")
    parsed_in = time.perf_counter() - started
    with capsys.disabled():
        print(f"\ncloudflare-shaped components.json: {len(body)} bytes "
              f"({len(body) / cap:.1%} of status_max_bytes {cap}); parsed in "
              f"{parsed_in * 1000:.1f} ms")
    assert report.global_status == "operational"
    assert 100_000 < len(body) < cap // 4


# --- Cloudflare: only Turnstile decides ----------------------------------------------------------


def test_turnstile_in_major_outage_reads_major_outage(
    cloudflare: FakeCloudflareStatusPage, turnstile: StatusClient
) -> None:
    assert turnstile.fetch().global_status == "operational"
    cloudflare.set_turnstile("major_outage")
    report = turnstile.fetch()
    assert report.global_status == "major_outage"
    assert report.global_component is not None
    assert report.global_component.name == "Turnstile"


@pytest.mark.parametrize("elsewhere", [
    pytest.param(lambda page: page.set_pop("AMS", "major_outage"), id="a PoP"),
    pytest.param(lambda page: page.set_pop(page.pop_ids["SIN"], "major_outage"), id="a PoP by id"),
    pytest.param(lambda page: page.set_region_group("Europe", "major_outage"), id="a region"),
    pytest.param(lambda page: page.set_component("Cloudflare APIs", "major_outage"),
                 id="another service"),
    pytest.param(lambda page: page.set_indicator("major"), id="the page indicator"),
])
def test_an_outage_anywhere_else_leaves_turnstile_operational(
    cloudflare: FakeCloudflareStatusPage, turnstile: StatusClient, elsewhere: object,
) -> None:
    elsewhere(cloudflare)  # type: ignore[operator]
    assert turnstile.fetch().global_status == "operational"


def test_a_whole_region_really_is_down_on_the_page(cloudflare: FakeCloudflareStatusPage) -> None:
    cloudflare.set_region_group("Europe", "major_outage")
    components = {c["id"]: c for c in cloudflare.components_document()["components"]}
    europe = components[cloudflare.region_group_ids["Europe"]]
    assert europe["status"] == "major_outage", "a group reports its worst member"
    assert {components[m]["status"] for m in europe["components"]} == {"major_outage"}
    assert components["1km35smx8p41"]["status"] == "operational"
    assert cloudflare.status_document()["status"]["indicator"] == "critical"


def test_every_region_down_and_the_indicator_critical_still_is_not_turnstile(
    cloudflare: FakeCloudflareStatusPage, turnstile: StatusClient
) -> None:
    for region in cloudflare.REGIONS:
        cloudflare.set_region_group(region, "major_outage")
    cloudflare.set_indicator("critical")
    assert turnstile.fetch().global_status == "operational"


def test_the_turnstile_component_stays_pinned_by_id(
    cloudflare: FakeCloudflareStatusPage, turnstile: StatusClient
) -> None:
    turnstile.fetch()
    # Another component takes Turnstile's name: the pinned id still decides.
    cloudflare.set_name("Turnstile", component=cloudflare.service_ids["Pages"])
    cloudflare.set_component(cloudflare.service_ids["Pages"], "major_outage")
    report = turnstile.fetch()
    assert report.global_status == "operational"
    assert report.global_component is not None
    assert report.global_component.id == "m4jywscr0n0k"


def test_a_page_without_the_turnstile_component_is_an_error_never_a_bypass(
    cloudflare: FakeCloudflareStatusPage, turnstile: StatusClient
) -> None:
    assert turnstile.fetch().global_status == "operational"
    cloudflare.set_region_group("Europe", "major_outage")
    cloudflare.set_fault("missing_global")
    assert "m4jywscr0n0k" not in get(cloudflare).decode()
    with pytest.raises(GlobalComponentError, match="m4jywscr0n0k"):
        turnstile.fetch()
    fresh = StatusClient(cloudflare.URL, global_component="m4jywscr0n0k",
                         transport=cloudflare.transport())
    with pytest.raises(GlobalComponentError, match="neither the id nor the exact name"):
        fresh.fetch()


def test_the_services_group_is_refused_as_the_global_component(
    cloudflare: FakeCloudflareStatusPage,
) -> None:
    client = StatusClient(cloudflare.URL, global_component="1km35smx8p41",
                          transport=cloudflare.transport())
    with pytest.raises(GlobalComponentError, match="group component"):
        client.fetch()


def test_without_a_configured_component_nothing_is_guessed(
    cloudflare: FakeCloudflareStatusPage,
) -> None:
    client = StatusClient(cloudflare.URL, transport=cloudflare.transport())
    with pytest.raises(GlobalComponentError, match="groups or members of groups"):
        client.fetch()


def test_the_shared_faults_serve_the_cloudflare_page(
    cloudflare: FakeCloudflareStatusPage,
) -> None:
    cloudflare.set_fault("unknown_status")
    turnstile = next(c for c in json.loads(get(cloudflare))["components"]
                     if c["id"] == "m4jywscr0n0k")
    assert turnstile["status"] == "service_disruption"
    cloudflare.set_fault("503", retry_after=30)
    reply = cloudflare.handle(FakeRequest("GET", COMPONENTS, {}, {}, b""))
    assert (reply.status, dict(reply.headers)["Retry-After"]) == (503, "30")
    assert cloudflare.requests == 2


def test_unknown_pops_regions_and_groups_are_refused(
    cloudflare: FakeCloudflareStatusPage,
) -> None:
    with pytest.raises(KeyError, match="no PoP"):
        cloudflare.set_pop("XXX", "major_outage")
    with pytest.raises(KeyError, match="no region"):
        cloudflare.set_region_group("Antarctica", "major_outage")
    with pytest.raises(ValueError, match="is a group"):
        cloudflare.set_component("Europe", "major_outage")
    with pytest.raises(ValueError, match="not a group"):
        cloudflare.set_group("Turnstile", "major_outage")


# --- hCaptcha ------------------------------------------------------------------------------------


def test_captcha_api_is_read_by_its_exact_name(hcaptcha: FakeHCaptchaStatusPage) -> None:
    client = captcha_api(hcaptcha)
    assert client.fetch().global_status == "operational"
    hcaptcha.set_captcha_api("partial_outage")
    report = client.fetch()
    assert report.global_status == "partial_outage"
    assert report.global_component is not None
    assert report.global_component.id == hcaptcha.CAPTCHA_API_ID


@pytest.mark.parametrize("other", ["API loads", "Enterprise: Analytics queries",
                                   "Passkey support"])
def test_another_hcaptcha_component_in_outage_changes_nothing(
    hcaptcha: FakeHCaptchaStatusPage, other: str
) -> None:
    hcaptcha.set_component(other, "major_outage")
    assert hcaptcha.status_document()["status"]["indicator"] == "critical"
    assert captcha_api(hcaptcha).fetch().global_status == "operational"


def test_two_components_named_captcha_api_is_an_error(hcaptcha: FakeHCaptchaStatusPage) -> None:
    hcaptcha.set_name("Captcha API", component=hcaptcha.component_ids["API loads"])
    with pytest.raises(GlobalComponentError, match="names 2 components"):
        captcha_api(hcaptcha).fetch()
    with pytest.raises(KeyError, match="several components"):
        hcaptcha.set_component("Captcha API", "major_outage")


# --- FakeStatusPage built from components --------------------------------------------------------


def test_a_page_refuses_a_component_list_a_real_page_could_not_serve() -> None:
    with pytest.raises(ValueError, match="unique"):
        FakeStatusPage(components=[PageComponent("a", "A"), PageComponent("a", "B")],
                       global_id="a")
    with pytest.raises(ValueError, match="does not list it"):
        FakeStatusPage(components=[PageComponent("a", "A", group_id="g")], global_id="a")
    with pytest.raises(ValueError, match="non-group"):
        FakeStatusPage(components=[PageComponent("g", "G", members=("a",)),
                                   PageComponent("a", "A", group_id="g")], global_id="g")
    with pytest.raises(ValueError, match="not both"):
        FakeStatusPage(regions=("us-east-1",), components=[PageComponent("a", "A")],
                       global_id="a")


# --- over a real socket, with the real runtime ---------------------------------------------------


def test_the_turnstile_preset_end_to_end_over_a_socket() -> None:
    page = FakeCloudflareStatusPage()
    with page.serve():
        runtime = FailOpen(Config(vendor="turnstile", private_key="k", status_url=page.url,
                                  protected_paths=("/login",), outage_rate="none"))
        try:
            assert runtime.config.global_component == "m4jywscr0n0k", "the preset's component"
            runtime.poll_now()
            assert runtime.state.enforce is True
            page.set_pop("AMS", "major_outage")
            page.set_region_group("Asia", "major_outage")
            page.set_indicator("major")
            runtime.poll_now()
            assert runtime.state.enforce is True, "a PoP outage is not Turnstile's"
            page.set_turnstile("major_outage")
            runtime.poll_now()
            assert runtime.state.enforce is False, "Turnstile's outage lifts enforcement"
            assert runtime.state.global_status == "major_outage"
            page.set_turnstile("operational")
            runtime.poll_now()
            assert runtime.state.enforce is False, "recovery takes two readings (hysteresis)"
            runtime.poll_now()
            assert runtime.state.enforce is True, "and Turnstile's recovery restores it"
        finally:
            runtime.stop()
    assert page.requests >= 4


# --- failopen emulate status --shape ---------------------------------------------------------


def test_emulate_set_and_show_drive_a_shaped_page(capsys: pytest.CaptureFixture[str]) -> None:
    page = FakeCloudflareStatusPage()
    with page.serve(control=True):
        assert main(["emulate", "status", "--url", page.url, "--set", "global=major_outage"]) == 0
        assert "global=major_outage" in capsys.readouterr().out
        client = StatusClient(page.url, global_component="m4jywscr0n0k")
        assert client.fetch().global_status == "major_outage"
        assert main(["emulate", "status", "--url", page.url, "--set", "fault=503"]) == 0
        assert main(["emulate", "status", "--url", page.url, "--show"]) == 0
        assert "fault=503" in capsys.readouterr().out
        assert main(["emulate", "status", "--url", page.url, "--show", "--shape",
                     "hcaptcha"]) == 2, "--shape configures a new fake, not a running one"
    assert main(["emulate", "status", "--shape", "cloudflare", "--regions", "us-east-1"]) == 2
    assert "--shape cloudflare has its vendor's components" in capsys.readouterr().err


def test_emulate_status_shape_serves_the_vendors_page() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAILOPEN_")}
    proc = subprocess.Popen([str(FAILOPEN), "emulate", "status", "--shape", "hcaptcha",
                             "--port", "0", "--global", "partial_outage"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split(": ", 1)[1].strip()
        assert "Captcha API" in proc.stdout.readline()
        client = StatusClient(url, global_component="Captcha API")
        assert client.fetch().global_status == "partial_outage"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
