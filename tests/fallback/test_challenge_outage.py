"""A challenge names the outage it was issued in (issue 31, item A3): ``off_since_ms`` in its
signed salt, and ``check(began_after=...)`` refusing one from an outage that began before
enforcement last resumed. tests/test_outage_bind.py runs the whole reproducer."""

from __future__ import annotations

import datetime

from altcha import v1
from test_challenge import COST, SECRET, TTL, encode, salt_params, solve

from failopen.fallback import FallbackChallenges, SolutionCheck
from failopen.secret import Secret
from failopen.testing import FakeClock

EARLIER = SolutionCheck(False, "issued in an earlier outage")


def made(clock: FakeClock, params: dict[str, str]) -> str:
    """A solved challenge signed with our secret, its salt carrying ``params``."""
    expires = datetime.datetime.fromtimestamp(int(clock.time()) + TTL, tz=datetime.timezone.utc)
    challenge = v1.create_challenge(v1.ChallengeOptions(
        hmac_key=SECRET, max_number=COST, expires=expires, params=params))
    return encode(solve({"algorithm": challenge.algorithm, "challenge": challenge.challenge,
                         "maxnumber": COST, "salt": challenge.salt,
                         "signature": challenge.signature}))


def test_the_outage_start_is_signed_and_bounds_the_check() -> None:
    clock = FakeClock()
    challenges = FallbackChallenges(Secret(SECRET), cost=COST, ttl=TTL, clock=clock)
    began = clock.time() - 60.0
    issued = challenges.issue(off_since=began)
    assert salt_params(issued["salt"])["off_since_ms"] == str(int(began * 1000))
    payload = encode(solve(issued))
    clock.advance(5)
    assert challenges.check(payload, issued_after=0, began_after=began).ok
    assert challenges.check(payload, issued_after=0, began_after=None).ok
    assert challenges.check(payload, issued_after=0, began_after=float("-inf")).ok
    # Enforcement resumed a millisecond after that outage began: the challenge is from it.
    assert challenges.check(payload, issued_after=0, began_after=began + 0.001) == EARLIER
    assert challenges.check(payload, issued_after=0, began_after=float("nan")) == EARLIER
    assert challenges.check(payload, issued_after=0, began_after=float("inf")) == EARLIER


def test_a_moved_outage_start_breaks_the_challenge() -> None:
    clock = FakeClock()
    challenges = FallbackChallenges(Secret(SECRET), cost=COST, ttl=TTL, clock=clock)
    fields = solve(challenges.issue(off_since=clock.time() - 60.0))
    later = str(int(clock.time() * 1000))
    for salt in (fields["salt"].replace("off_since_ms=", "off_since_ms=9"),
                 fields["salt"] + f"off_since_ms={later}&"):
        assert challenges.check(encode({**fields, "salt": salt}), issued_after=0,
                                began_after=clock.time()).reason == "wrong answer"


def test_without_an_outage_start_a_challenge_is_judged_by_its_issue_time() -> None:
    """Issued by a failopen before this change (or with an outage start after its issue time,
    or two of them, which issue() never writes): read as if its outage began when it was
    issued, to the millisecond where it carries them."""
    clock = FakeClock()
    challenges = FallbackChallenges(Secret(SECRET), cost=COST, ttl=TTL, clock=clock)
    now_ms = int(clock.time() * 1000)
    whole = str(int(clock.time()))
    for params in ({"issued": whole, "issued_ms": str(now_ms)},
                   {"issued": whole, "issued_ms": str(now_ms),
                    "off_since_ms": str(now_ms + 5000)},
                   {"issued": whole, "issued_ms": str(now_ms), "off_since_ms": "0&off_since_ms=0"}):
        payload = made(clock, params)
        assert challenges.check(payload, issued_after=0, began_after=clock.time()).ok, params
        refused = challenges.check(payload, issued_after=0, began_after=clock.time() + 0.001)
        assert refused == EARLIER, params


def test_issue_without_an_outage_start_writes_none() -> None:
    clock = FakeClock()
    challenges = FallbackChallenges(Secret(SECRET), cost=COST, ttl=TTL, clock=clock)
    assert "off_since_ms" not in salt_params(challenges.issue()["salt"])
    assert "off_since_ms" not in salt_params(challenges.issue(off_since=float("nan"))["salt"])
