"""What a path's case does to its protection and its outage policy (issue 31, review)."""

from __future__ import annotations

import pytest

from failopen.config import Config
from failopen.web import RoutePolicies


@pytest.mark.parametrize("path", ["/JOIN/", "/Join", "/join/Submit", "/J%4FIN/", "/JOİN/",
                                  "/Joın/", "/ｊöin/", "/SIGN-UP/x", "/Sign-Up"])
def test_a_path_in_another_case_is_protected_as_its_route(path: str) -> None:
    # A router or a database that compares without case (a (?i) regex, Wagtail's slug on
    # MySQL) serves /JOIN/ as /join/: the guard must judge it so, and by that route's policy.
    config = Config(protected_paths=("/join/", "/Sign-Up/"))
    assert config.is_protected("POST", path), path
    policies = RoutePolicies(("/join/", "/Sign-Up/"), default="open",
                             routes={"/join/": "closed", "/Sign-Up/": "closed"})
    assert policies.for_path(path) is not None and policies.for_path(path)[1] == "closed", path


def test_other_paths_stay_unprotected() -> None:
    config = Config(protected_paths=("/join/",))
    assert not config.is_protected("POST", "/joint")
    assert not config.is_protected("POST", "/")
    assert RoutePolicies(("/join/",)).for_path("/JOINT") is None
