"""The layout of Cloudflare's status page (www.cloudflarestatus.com), as a fake serves it.

What is real (Cloudflare's Statuspage, page ``yh6f0r4529hb``, seen through its API's users and
Cloudflare's own Terraform provider): the group ``Cloudflare Sites and Services``
(``1km35smx8p41``, with its description) holding the service components, among them Turnstile
(``m4jywscr0n0k``), ``Cloudflare APIs`` (``g4tb35rs9yw7``), Pages, Challenge Platform and Bot
Management, every one with ``description`` null; some 330 data centres (PoPs) named
``City, Country - (IATA)``, each in one of seven regional groups, all with ``description`` null and
``showcase`` false; the eight group ids. Amsterdam (``57ctn3f2qsyj``) is in the group
``zqxhg7y54vy8``, so that one is Europe; which of the other six ids is which region is this
fake's guess. Generated, deterministically: all PoPs but a few real ones per region (made-up
city names, real countries, made-up codes) and their ids.
"""

from __future__ import annotations

import random
import string

from failopen.testing._status_layout import PageComponent

__all__ = ["REGIONS", "SERVICES", "SERVICES_GROUP", "TURNSTILE_ID", "cloudflare_layout"]

TURNSTILE_ID = "m4jywscr0n0k"
SERVICES_GROUP = ("1km35smx8p41", "Cloudflare Sites and Services",
                  "Sites and services that Cloudflare customers use to interact with the "
                  "Cloudflare Network and its provided services")
#: (name, id) of the services in the group, ids as Cloudflare's Terraform provider lists them.
SERVICES = (
    ("Access", "w4k8yvhfb3vp"), ("Always Online", "xm3cq0t85y10"), ("Analytics", "4c231tkdlpcl"),
    ("Cloudflare APIs", "g4tb35rs9yw7"), ("API Shield", "g9yx473yjk9t"),
    ("Argo Smart Routing", "z9w398bsjvnq"), ("Audit Logs", "2469qcw8rvjp"),
    ("Authoritative DNS", "dp8ppfycqxcs"), ("Billing", "ll1x88wwz4fq"),
    ("Bot Management", "s0991jwsqllx"), ("Browser Isolation", "q0dfbn0p6hyt"),
    ("Cache Reserve", "3q1jnbdbn845"), ("CDN/Cache", "5wnz34mhfhrk"),
    ("Challenge Platform", "x0tkn0hzrtw7"), ("DNS Root Servers", "4l9qztbt6rbj"),
    ("Durable Objects", "bty1yz6dhh0v"), ("Email Routing", "gjb0yzvvrpf6"),
    ("Gateway", "gyx2yygg7lmd"), ("Images", "3lbj8lp3d750"),
    ("Load Balancing and Monitoring", "8sn2w5kyxfnp"), ("Logs", "k0mgxrls5y1b"),
    ("Magic Transit", "bjlxcss20fsl"), ("Pages", "vgxj684rcw7t"), ("R2", "hb7g5sq2zz0h"),
    ("Registrar", "kn2xkt469vyh"), ("Stream", "47xg28c02lnk"), ("Turnstile", TURNSTILE_ID),
    ("WARP", "k04jkcpzxn94"), ("Workers", "57srcl8zcn7c"), ("Workers KV", "tmh50tx2nprs"),
)
#: region -> (group id, how many PoPs, countries, real PoPs as (city, country, IATA)).
REGIONS: dict[str, tuple[str, int, tuple[str, ...], tuple[tuple[str, str, str], ...]]] = {
    "Africa": ("4l01sk5cdn5c", 40, (
        "South Africa", "Nigeria", "Kenya", "Egypt", "Morocco", "Ghana", "Senegal", "Angola",
        "Tanzania", "Mozambique"), (
        ("Johannesburg", "South Africa", "JNB"), ("Cape Town", "South Africa", "CPT"),
        ("Lagos", "Nigeria", "LOS"), ("Nairobi", "Kenya", "NBO"), ("Cairo", "Egypt", "CAI"),
        ("Casablanca", "Morocco", "CMN"), ("Accra", "Ghana", "ACC"), ("Dakar", "Senegal", "DKR"))),
    "Asia": ("m3639x4txd08", 90, (
        "Japan", "India", "China", "Indonesia", "Philippines", "Vietnam", "Thailand", "Malaysia",
        "South Korea", "Pakistan", "Bangladesh", "Nepal", "Kazakhstan"), (
        ("Singapore", "Singapore", "SIN"), ("Tokyo", "Japan", "NRT"), ("Osaka", "Japan", "KIX"),
        ("Hong Kong", "Hong Kong", "HKG"), ("Seoul", "South Korea", "ICN"),
        ("Mumbai", "India", "BOM"), ("Chennai", "India", "MAA"), ("Bangkok", "Thailand", "BKK"),
        ("Jakarta", "Indonesia", "CGK"), ("Taipei", "Taiwan", "TPE"))),
    "Europe": ("zqxhg7y54vy8", 70, (
        "Germany", "France", "United Kingdom", "Spain", "Italy", "Poland", "Sweden", "Norway",
        "Finland", "Romania", "Portugal", "Czech Republic", "Greece", "Ukraine", "Turkey"), (
        ("Amsterdam", "Netherlands", "AMS"), ("Frankfurt", "Germany", "FRA"),
        ("London", "United Kingdom", "LHR"), ("Paris", "France", "CDG"),
        ("Madrid", "Spain", "MAD"), ("Milan", "Italy", "MXP"), ("Stockholm", "Sweden", "ARN"),
        ("Warsaw", "Poland", "WAW"), ("Zürich", "Switzerland", "ZRH"))),
    "Latin America & the Caribbean": ("q6qm6fvkst4h", 50, (
        "Brazil", "Argentina", "Chile", "Colombia", "Peru", "Mexico", "Ecuador", "Guatemala",
        "Dominican Republic", "Paraguay"), (
        ("São Paulo", "Brazil", "GRU"), ("Rio de Janeiro", "Brazil", "GIG"),
        ("Buenos Aires", "Argentina", "EZE"), ("Santiago", "Chile", "SCL"),
        ("Bogotá", "Colombia", "BOG"), ("Lima", "Peru", "LIM"), ("Panama City", "Panama", "PTY"))),
    "Middle East": ("00gpj4s37mz4", 20, (
        "Saudi Arabia", "United Arab Emirates", "Iraq", "Israel", "Jordan", "Oman", "Kuwait"), (
        ("Dubai", "United Arab Emirates", "DXB"), ("Doha", "Qatar", "DOH"),
        ("Riyadh", "Saudi Arabia", "RUH"), ("Tel Aviv", "Israel", "TLV"),
        ("Muscat", "Oman", "MCT"))),
    "North America": ("77867vxkttgw", 50, ("United States", "Canada"), (
        ("Ashburn, VA", "United States", "IAD"), ("Chicago, IL", "United States", "ORD"),
        ("Dallas, TX", "United States", "DFW"), ("Los Angeles, CA", "United States", "LAX"),
        ("San Jose, CA", "United States", "SJC"), ("Seattle, WA", "United States", "SEA"),
        ("Newark, NJ", "United States", "EWR"), ("Toronto, ON", "Canada", "YYZ"),
        ("Montréal, QC", "Canada", "YUL"))),
    "Oceania": ("91blz4ztt7dm", 12, ("Australia", "New Zealand", "Fiji", "Papua New Guinea"), (
        ("Sydney, NSW", "Australia", "SYD"), ("Melbourne, VIC", "Australia", "MEL"),
        ("Brisbane, QLD", "Australia", "BNE"), ("Perth, WA", "Australia", "PER"),
        ("Auckland", "New Zealand", "AKL"), ("Nouméa", "New Caledonia", "NOU"))),
}
_KNOWN_POP_IDS = {"AMS": "57ctn3f2qsyj"}
_SYLLABLES = ("ka", "lo", "ra", "ven", "mar", "tu", "sel", "do", "ri", "ban", "zu", "pe", "na",
              "gor", "li", "sa", "mi", "ton", "ba", "ke")
_ID_LETTERS = string.ascii_lowercase + string.digits


def _new_id(rng: random.Random, taken: set[str]) -> str:
    while (cid := "".join(rng.choices(_ID_LETTERS, k=12))) in taken:
        pass
    taken.add(cid)
    return cid


def _new_code(rng: random.Random, city: str, taken: set[str]) -> str:
    while (code := city[0].upper() + "".join(rng.choices(string.ascii_uppercase, k=2))) in taken:
        pass
    taken.add(code)
    return code


def _pops(rng: random.Random, ids: set[str], codes: set[str]) -> dict[str, list[tuple[str, str]]]:
    """region -> [(IATA, name)], the real PoPs first, the made-up ones after."""
    by_region: dict[str, list[tuple[str, str]]] = {}
    for region, (_, count, countries, real) in REGIONS.items():
        pops = [(code, f"{city}, {country} - ({code})") for city, country, code in real]
        while len(pops) < count:
            city = "".join(rng.choices(_SYLLABLES, k=rng.choice((2, 3)))).capitalize()
            code = _new_code(rng, city, codes)
            pops.append((code, f"{city}, {rng.choice(countries)} - ({code})"))
        by_region[region] = pops
    return by_region


def cloudflare_layout() -> tuple[list[PageComponent], dict[str, str], dict[str, str]]:
    """The page's components (the services group first, then each region's group and PoPs),
    the PoPs' ids by IATA code, and the regional groups' ids by region. Same every call."""
    rng = random.Random("failopen cloudflare status page")
    ids = {cid for _, cid in SERVICES} | {SERVICES_GROUP[0]} | set(_KNOWN_POP_IDS.values())
    ids |= {group_id for group_id, *_ in REGIONS.values()}
    codes = {code for *_, real in REGIONS.values() for _, _, code in real}
    group_id, group_name, about = SERVICES_GROUP
    layout = [PageComponent(group_id, group_name, about,
                            members=tuple(cid for _, cid in SERVICES))]
    layout.extend(PageComponent(cid, name, group_id=group_id) for name, cid in SERVICES)
    pop_ids: dict[str, str] = {}
    group_ids: dict[str, str] = {}
    for region, pops in _pops(rng, ids, codes).items():
        region_id = group_ids[region] = REGIONS[region][0]
        members = [_KNOWN_POP_IDS.get(code) or _new_id(rng, ids) for code, _ in pops]
        layout.append(PageComponent(region_id, region, members=tuple(members)))
        for (code, name), cid in zip(pops, members, strict=True):
            pop_ids[code] = cid
            layout.append(PageComponent(cid, name, group_id=region_id))
    return layout, pop_ids, group_ids
