"""Every spelling of a request path that a router may resolve to a protected route.

``Config.protects_path`` (tests/test_config.py) asks for these only for odd paths; here each way
a spelling arises is pinned on its own, since a missing spelling is a bypass.
"""

from __future__ import annotations

import pytest

from failopen._internal.paths import ODD_CHARACTER, spellings


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
