"""Every spelling of a request path that a router may resolve to a protected route.

``Config.protects_path`` (tests/test_config.py) asks for these only for odd paths; here each way
a spelling arises is pinned on its own, since a missing spelling is a bypass.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from failopen._internal.paths import ODD_CHARACTER, request_paths, spellings
from failopen.web import RoutePolicies


@pytest.mark.parametrize(("path", "expected"), [
    ("/signup%0A", "/signup\n"),               # decoded once more
    ("/sign%75p", "/signup"),
    ("\\signup", "/signup"),                   # a backslash read as a slash
    ("/signup\n", "/signup"),                  # cut at a character a router stops at
    ("/sign\u200bup", "/signup"),              # an invisible character dropped
    ("/signup;jsessionid=1", "/signup"),       # cut at ";"
    ("/a/../signup", "/signup"),               # dot segments resolved
    ("//signup", "/signup"),                   # slashes merged
    ("/x/.//../signup/./", "/signup"),
    ("/sign%5C..%5Csignup", "/signup"),        # decoded, then "\\" as "/", then resolved
    ("/%2e%2e/signup", "/signup"),
])
def test_a_spelling_a_router_may_resolve_to_is_among_the_spellings(
    path: str, expected: str,
) -> None:
    assert expected in spellings(path)


@pytest.mark.parametrize("path", ["/signup", "/a/b", "/sign%75p", "/a//b", "/a\nb"])
def test_the_path_itself_is_always_a_spelling(path: str) -> None:
    assert path in spellings(path)


def test_a_plain_path_has_only_itself() -> None:
    # Spellings only add protection, but a plain path must not grow invented ones.
    assert spellings("/accounts/login/") == {"/accounts/login/"}


def test_an_undecodable_escape_is_kept_as_it_is() -> None:
    assert spellings("/signup%zz") == {"/signup%zz"}


@pytest.mark.parametrize("path", ["/signup\x00", "/signup%0a", "/a#b", "/a?b", "/a;b", "/a\\b",
                                  "/caf\u00e9", "/a b", "/a\u2028"])
def test_an_odd_character_is_noticed(path: str) -> None:
    assert ODD_CHARACTER.search(path) is not None


@pytest.mark.parametrize("path", ["/signup", "/accounts/login/", "/a-b_c.d~e", "/x:y@z!$&'()*+,="])
def test_a_canonical_path_costs_no_spellings(path: str) -> None:
    assert ODD_CHARACTER.search(path) is None


# --- the request a form's action arrives as (the flag endpoint's ?path=) ----------------------


@pytest.mark.parametrize(("url_path", "mount", "expected"), [
    ("/login", "", ("/login", "/login")),
    ("/app/login", "/app", ("/app/login", "/login")),
    ("/app/login", "/app/", ("/app/login", "/login")),   # a SCRIPT_NAME ending in "/"
    ("/app", "/app", ("/app", "")),                       # the mount itself: PATH_INFO ""
    ("/apple/login", "/app", ("/apple/login", "/apple/login")),  # not under the mount
    ("/login", "/app", ("/login", "/login")),
    ("/app/inscri%C3%A7%C3%A3o/", "/app", ("/app/inscrição/", "/inscrição/")),
    ("/ap%70/login", "/app", ("/app/login", "/login")),  # decoded before the mount is taken off
    ("/app/login%FF", "/app", ("/app/login\ufffd", "/login\ufffd")),  # as uvicorn reads it
    ("/app/%zz%", "/app", ("/app/%zz%", "/%zz%")),      # no escape: kept
    ("/app/%2500", "/app", ("/app/%00", "/%00")),       # decoded once: spellings go on
    ("/app/a%00b", "/app", ("/app/a\x00b", "/a\x00b")),
    ("/inscrição/", "", ("/inscrição/", "/inscrição/")),  # sent unencoded: as it is
    ("/%C3%A9/login", "/é", ("/é/login", "/login")),  # a mount the server gave decoded
])
def test_a_form_s_action_arrives_as_the_server_decodes_it(
    url_path: str, mount: str, expected: tuple[str, str],
) -> None:
    assert request_paths(url_path, mount) == expected


_POLICIES = RoutePolicies(("/login", "/inscrição/", "/raw/"),
                          routes={"/inscrição/": "fallback", "/raw/": "closed"})


@pytest.mark.parametrize(("asked", "mount", "expected"), [
    ("/app/inscri%C3%A7%C3%A3o/", "/app", ("/inscrição/", "fallback")),
    ("/app/login%0A", "/app", ("/login", "open")),
    ("/app//raw/x", "/app", ("/raw/", "closed")),
    ("/app/elsewhere", "/app", None),
    (None, "/app", None), ("", "", None), ("login", "", None),  # no path at all
    ("/app", "/app", None),
])
def test_an_asked_path_gets_the_route_and_policy_the_guard_gives_it(
    asked: str | None, mount: str, expected: tuple[str, str] | None,
) -> None:
    assert _POLICIES.for_asked(asked, mount) == expected


@given(asked=st.text(max_size=200), mount=st.sampled_from(["", "/app", "/app/", "/é"]))
def test_any_asked_path_is_answered_without_raising(asked: str, mount: str) -> None:
    found = _POLICIES.for_asked(asked, mount)
    assert found is None or found[1] in {"open", "fallback", "closed"}
    if asked.startswith("/"):
        assert found == _POLICIES.for_path(*request_paths(asked, mount))


def test_a_huge_asked_path_is_answered() -> None:
    # Bounded by the request line a server accepts; the work is linear in it (no timing here).
    asked = "/app/login" + "%2e%2e/%FF%00//" * 20_000
    assert _POLICIES.for_asked(asked, "/app") == ("/login", "open")
