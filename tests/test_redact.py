"""Text from outside made safe to show the public: an error on the flag endpoint, a server named
in an error. Bounded, one line, and without what a URL carries (userinfo, query, fragment)."""

from __future__ import annotations

import pytest

from failopen._internal.redact import MAX_ERROR, MAX_LOGGED_ERROR, host_port, public_error


def test_a_long_error_is_cut_to_the_limit_with_an_ellipsis() -> None:
    shown = public_error(ValueError("x" * 1000))
    assert len(shown) == MAX_ERROR == 300
    assert shown.endswith("...") and shown.startswith("ValueError: xxx")
    text = "word " * 20
    assert public_error(ValueError(text), limit=50) == ("ValueError: " + text)[:47] + "..."


def test_an_error_exactly_at_the_limit_is_whole() -> None:
    text = "y" * (MAX_ERROR - len("ValueError: "))
    assert public_error(ValueError(text)) == f"ValueError: {text}"
    assert public_error(ValueError(text + "z")).endswith("...")


def test_the_logged_limit_keeps_more() -> None:
    assert MAX_LOGGED_ERROR == 2000
    shown = public_error(ValueError("w" * 3000), limit=MAX_LOGGED_ERROR)
    assert len(shown) == 2000


@pytest.mark.parametrize("control", ["\n", "\r\n", "\x00", "\x1b", "\x85", "\u2028", "\u2029",
                                     "\x7f", "\x9f"])
def test_control_characters_become_one_space(control: str) -> None:
    assert public_error(ValueError(f"a{control}b")) == "ValueError: a b"


def test_a_password_beyond_the_cut_is_not_half_shown() -> None:
    # The text is cut after redaction: a URL straddling the limit never shows its userinfo.
    text = "x" * 250 + " https://ops:hunter2hunter2@proxy.internal/"
    shown = public_error(ValueError(text))
    assert "hunter2" not in shown and "ops:" not in shown


@pytest.mark.parametrize(("text", "shown"), [
    ("see https://h/p#frag", "ValueError: see https://h/p?***"),
    ("a://u:p@h/x://v:q@k", "ValueError: a://***@h/x://***@k"),
    ("ftp://user@host", "ValueError: ftp://***@host"),
    ("https://a@b@host/p", "ValueError: https://***@host/p"),
    ("no url here: a@b", "ValueError: no url here: a@b"),
    ("https://plain.host/p", "ValueError: https://plain.host/p"),
])
def test_every_url_in_a_word_loses_its_userinfo_query_and_fragment(text: str, shown: str) -> None:
    assert public_error(ValueError(text)) == shown


@pytest.mark.parametrize(("url", "shown"), [
    ("https://user:pw@vendor.test/path?token=1", "vendor.test:443"),
    ("http://vendor.test/", "vendor.test:80"),
    ("HTTP://vendor.test/", "vendor.test:80"),
    ("https://vendor.test:8443/", "vendor.test:8443"),
    ("redis://cache.internal", "cache.internal"),
    ("https://[2001:db8::1]:9000/x", "[2001:db8::1]:9000"),
    ("https://[2001:db8::1]/x", "[2001:db8::1]:443"),
    ("not a url", "the server"),
    ("https://vendor.test:99999/", "the server"),
    ("https://[bad/", "the server"),
])
def test_host_port_names_the_server_and_nothing_it_was_sent(url: str, shown: str) -> None:
    assert host_port(url) == shown


@pytest.mark.parametrize(("text", "shown"), [
    ("why?https://u:p@h/p", "ValueError: why?https://***@h/p"),   # a "?" before the URL stays
    ("see#https://u:p@h/p", "ValueError: see#https://***@h/p"),   # so does a "#"
    ("https://h/p?a=1?b=2", "ValueError: https://h/p?***"),         # cut at the first "?" ...
    ("https://h/p#a#b", "ValueError: https://h/p?***"),             # ... or "#"
    ("https://h/p?tok=1&next=http://k/", "ValueError: https://h/p?***"),  # a URL in the query
    ("http ://user:pass@host", "ValueError: http ://***@host"),     # a word that starts at "://"
])
def test_the_query_is_cut_from_the_first_url_on(text: str, shown: str) -> None:
    assert public_error(ValueError(text)) == shown


@pytest.mark.parametrize("size", [1200, 3000, 10_000])
@pytest.mark.parametrize("limit", [MAX_ERROR, MAX_LOGGED_ERROR])
def test_a_url_whose_password_outruns_the_text_read_shows_no_part_of_it(
    size: int, limit: int,
) -> None:
    # Only the first 4 * limit characters are read (a hostile page chooses part of the text):
    # a cut before the "@" must not leave the userinfo looking like a host to show.
    password = ("S3cr3tTok" * (size // 9 + 1))[:size]
    exc = ValueError(f"proxy https://svc:{password}@proxy.internal:3128/ refused")
    shown = public_error(exc, limit=limit)
    assert "S3cr3t" not in shown and "svc:" not in shown
    assert shown.startswith("ValueError: proxy ")


def test_the_word_the_read_stops_in_is_withheld_whole_and_marked() -> None:
    # 4 * limit characters are read; the URL is cut there, before its "@": withheld, marked.
    text = "proxy https://svc:" + "p" * 1250 + "@proxy.internal/ refused"
    assert public_error(ValueError(text)) == "ValueError: proxy ..."


def test_a_text_that_fits_what_is_read_keeps_its_last_word() -> None:
    whole = "ValueError: proxy " + "x" * (4 * MAX_ERROR - len("ValueError: proxy "))
    assert len(whole) == 4 * MAX_ERROR
    shown = public_error(ValueError(whole[len("ValueError: "):]))
    assert shown == whole[: MAX_ERROR - 3] + "..."
