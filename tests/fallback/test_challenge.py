"""The fallback challenge (issue 20): ALTCHA v1 challenges a real solver solves, and every way a
solution is refused, with the reason the logs will show."""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json
from typing import Any

import pytest
from altcha import v1
from hypothesis import given, settings
from hypothesis import strategies as st

from failopen.fallback import FallbackChallenges, SolutionCheck
from failopen.fallback.challenge import MAX_PAYLOAD
from failopen.secret import Secret
from failopen.testing import FakeClock

SECRET = "fallback-secret-" + "s" * 32
OTHER_SECRET = "another-deployment-" + "o" * 32
COST = 1000  # the test solves with Python: small, the protocol is the same
TTL = 300.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def challenges(clock: FakeClock) -> FallbackChallenges:
    return FallbackChallenges(Secret(SECRET), cost=COST, ttl=TTL, clock=clock)


def solve(challenge: dict[str, Any]) -> dict[str, Any]:
    """What the ALTCHA widget sends, solved by altcha's own solver."""
    found = v1.solve_challenge(challenge["challenge"], challenge["salt"], challenge["algorithm"],
                               challenge["maxnumber"])
    assert found is not None, "an issued challenge has a solution within maxnumber"
    return {"algorithm": challenge["algorithm"], "challenge": challenge["challenge"],
            "number": found.number, "salt": challenge["salt"],
            "signature": challenge["signature"]}


def encode(fields: Any) -> str:
    return base64.b64encode(json.dumps(fields).encode()).decode()


def salt_params(salt: str) -> dict[str, str]:
    return dict(item.split("=") for item in salt.partition("?")[2].split("&") if item)


# --- what the endpoint answers, and a solution accepted ------------------------------------------


def test_issue_answers_exactly_the_altcha_fields(
    challenges: FallbackChallenges, clock: FakeClock
) -> None:
    issued = challenges.issue()
    assert set(issued) == {"algorithm", "challenge", "maxnumber", "salt", "signature"}
    assert issued["algorithm"] == "SHA-256" and issued["maxnumber"] == COST
    params = salt_params(issued["salt"])
    assert int(params["expires"]) == clock.time() + TTL
    assert int(params["issued"]) == clock.time()
    json.dumps(issued)  # the endpoint answers it as JSON
    assert challenges.issue()["salt"] != issued["salt"], "every challenge is new"


def test_a_solved_challenge_is_accepted_with_its_key_expiry_and_issue_time(
    challenges: FallbackChallenges, clock: FakeClock
) -> None:
    issued = challenges.issue()
    check = challenges.check(encode(solve(issued)), issued_after=clock.time())
    assert check == SolutionCheck(
        ok=True, reason="ok",
        key=hashlib.sha256(issued["challenge"].encode()).hexdigest(),
        expires_at=clock.time() + TTL, issued_at=clock.time())
    # Single use is the record's job (failopen.fallback.used): the check itself is pure.
    assert challenges.check(encode(solve(issued)), issued_after=clock.time()).ok


def test_altcha_itself_accepts_what_we_issue(challenges: FallbackChallenges) -> None:
    """Interoperability: the ALTCHA library verifies our challenge and its solution."""
    payload = encode(solve(challenges.issue()))
    assert v1.verify_solution(payload, SECRET, check_expires=False) == (True, None)


def test_the_widget_payload_with_extra_fields_is_accepted(
    challenges: FallbackChallenges, clock: FakeClock
) -> None:
    # The ALTCHA widget may add "took" (solve time): unknown fields are not a reason to refuse.
    fields = {**solve(challenges.issue()), "took": 812}
    assert challenges.check(encode(fields), issued_after=clock.time()).ok


# --- refusals ------------------------------------------------------------------------------------


def test_a_forged_signature_is_refused(challenges: FallbackChallenges, clock: FakeClock) -> None:
    fields = solve(challenges.issue())
    fields["signature"] = hmac.new(b"guessed", fields["challenge"].encode(),
                                   hashlib.sha256).hexdigest()
    assert challenges.check(encode(fields), issued_after=0).reason == "bad signature"


def test_a_challenge_the_client_made_itself_is_refused(
    challenges: FallbackChallenges, clock: FakeClock
) -> None:
    """A bot skipping the server: its own salt, its own easy challenge, any signature."""
    mine = v1.create_challenge(v1.ChallengeOptions(hmac_key="bot", max_number=10, params={
        "issued": str(int(clock.time()))}))
    fields = solve({"algorithm": "SHA-256", "challenge": mine.challenge, "maxnumber": 10,
                    "salt": mine.salt, "signature": mine.signature})
    assert challenges.check(encode(fields), issued_after=0).reason == "bad signature"


def test_a_solution_from_another_deployments_secret_is_refused(clock: FakeClock) -> None:
    theirs = FallbackChallenges(Secret(OTHER_SECRET), cost=COST, ttl=TTL, clock=clock)
    ours = FallbackChallenges(Secret(SECRET), cost=COST, ttl=TTL, clock=clock)
    payload = encode(solve(theirs.issue()))
    assert theirs.check(payload, issued_after=0).ok
    assert ours.check(payload, issued_after=0) == SolutionCheck(False, "bad signature")


def test_a_wrong_number_is_refused(challenges: FallbackChallenges) -> None:
    fields = solve(challenges.issue())
    for number in (fields["number"] + 1, 0 if fields["number"] else 1, COST + 1):
        wrong = {**fields, "number": number}
        assert challenges.check(encode(wrong), issued_after=0).reason == "wrong answer"


@pytest.mark.parametrize("change", [
    lambda salt: salt.replace("expires=", "expires=9"),  # live longer
    lambda salt: salt.replace("issued=", "issued=9"),  # look issued later
    lambda salt: salt + "issued=9999999999&",  # a second "issued" spliced on
    lambda salt: salt.rstrip("&"),  # the same salt, without ALTCHA's delimiter
])
def test_a_tampered_salt_is_refused(challenges: FallbackChallenges, change: Any) -> None:
    fields = solve(challenges.issue())
    tampered = {**fields, "salt": change(fields["salt"])}
    if tampered["salt"] + "&" == fields["salt"]:
        # ALTCHA appends the delimiter before hashing: dropping it changes nothing, as in altcha.
        assert challenges.check(encode(tampered), issued_after=0).ok
    else:
        assert challenges.check(encode(tampered), issued_after=0).reason == "wrong answer"


def test_an_expired_challenge_is_refused(challenges: FallbackChallenges, clock: FakeClock) -> None:
    payload = encode(solve(challenges.issue()))
    clock.advance(TTL)
    assert challenges.check(payload, issued_after=0).ok, "valid up to its expiry"
    clock.advance(1)
    assert challenges.check(payload, issued_after=0) == SolutionCheck(False, "expired")


def test_a_challenge_issued_before_the_outage_began_is_refused(
    challenges: FallbackChallenges, clock: FakeClock
) -> None:
    """Fetched during an earlier outage (or stockpiled), used in this one: refused."""
    payload = encode(solve(challenges.issue()))
    issued_at = clock.time()
    clock.advance(30)
    assert challenges.check(payload, issued_after=issued_at).ok
    # To the millisecond (issue 31, item 9): not the whole second it was issued in.
    refused = challenges.check(payload, issued_after=issued_at + 0.001)
    assert refused == SolutionCheck(False, "issued while enforcing")
    assert challenges.check(payload, issued_after=float("nan")).reason == "issued while enforcing"


def test_a_challenge_issued_before_milliseconds_is_read_to_the_second(
    clock: FakeClock,
) -> None:
    """Issued by an earlier failopen (``issued`` only): still admitted, compared by the second,
    as then; an ``issued_ms`` that disagrees with ``issued`` is not ours and counts for nothing."""
    challenges = FallbackChallenges(Secret(SECRET), cost=COST, ttl=TTL, clock=clock)
    expires = datetime.datetime.fromtimestamp(int(clock.time()) + TTL, tz=datetime.timezone.utc)
    for params in ({"issued": str(int(clock.time()))},
                   {"issued": str(int(clock.time())), "issued_ms": "5"}):
        made = v1.create_challenge(v1.ChallengeOptions(
            hmac_key=SECRET, max_number=COST, expires=expires, params=params))
        payload = encode(solve({"algorithm": made.algorithm, "challenge": made.challenge,
                                "maxnumber": COST, "salt": made.salt,
                                "signature": made.signature}))
        check = challenges.check(payload, issued_after=clock.time() + 0.5)
        assert check.ok and check.issued_at == int(clock.time()), params


def test_a_challenge_signed_with_our_secret_but_not_issued_by_us_is_malformed(
    clock: FakeClock,
) -> None:
    """Another tool sharing the secret, without ``issued``: we cannot tell when it was made."""
    made = v1.create_challenge(v1.ChallengeOptions(hmac_key=SECRET, max_number=COST))
    fields = solve({"algorithm": made.algorithm, "challenge": made.challenge,
                    "maxnumber": COST, "salt": made.salt, "signature": made.signature})
    challenges = FallbackChallenges(Secret(SECRET), cost=COST, ttl=TTL, clock=clock)
    assert challenges.check(encode(fields), issued_after=0).reason == "malformed"


def test_a_payload_over_4_kb_is_refused_before_it_is_read(
    challenges: FallbackChallenges,
) -> None:
    fields = solve(challenges.issue())
    assert challenges.check(encode(fields), issued_after=0).ok
    padded = encode({**fields, "padding": "x" * MAX_PAYLOAD})
    assert len(padded) > MAX_PAYLOAD
    assert challenges.check(padded, issued_after=0) == SolutionCheck(False, "malformed")


@pytest.mark.parametrize("shape", [
    "number as text", "number as float", "number as bool", "negative number",
    "algorithm SHA-1", "missing signature", "challenge not hex", "signature upper case",
])
def test_odd_field_shapes_are_malformed(challenges: FallbackChallenges, shape: str) -> None:
    fields = solve(challenges.issue())
    changes: dict[str, Any] = {
        "number as text": {"number": str(fields["number"])},
        "number as float": {"number": float(fields["number"])},
        "number as bool": {"number": True},
        "negative number": {"number": -fields["number"] - 1},
        "algorithm SHA-1": {"algorithm": "SHA-1"},
        "challenge not hex": {"challenge": "z" * 64},
        "signature upper case": {"signature": fields["signature"].upper()},
    }
    odd = {**fields, **changes.get(shape, {})}
    if shape == "missing signature":
        del odd["signature"]
    assert challenges.check(encode(odd), issued_after=0) == SolutionCheck(False, "malformed")


@pytest.mark.parametrize("payload", [
    "", "not base64!", "bm90IGpzb24=", encode([1, 2]), encode("text"), encode(None),
    base64.b64encode(b"\xff\xfe").decode(), encode({}), "[" * 4000,
    base64.b64encode(b"[" * 3000).decode(), None, b"bytes", 12,
])
def test_garbage_is_malformed(challenges: FallbackChallenges, payload: Any) -> None:
    assert challenges.check(payload, issued_after=0) == SolutionCheck(False, "malformed")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=6000))
def test_any_text_is_refused_without_raising(text: str) -> None:
    challenges = FallbackChallenges(Secret(SECRET), cost=COST, ttl=TTL, clock=FakeClock())
    check = challenges.check(text, issued_after=0)
    assert not check.ok and check.reason in {"malformed", "bad signature", "wrong answer"}


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=80),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                 max_size=4),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({
    "algorithm": st.sampled_from(["SHA-256", "SHA-1", "sha-256"]) | _JSON,
    "challenge": st.text(alphabet="0123456789abcdef", min_size=64, max_size=64) | _JSON,
    "number": st.integers(min_value=-(10**30), max_value=10**30) | _JSON,
    "salt": st.text(max_size=200) | _JSON,
    "signature": st.text(alphabet="0123456789abcdef", min_size=64, max_size=64) | _JSON,
}))
def test_any_payload_shaped_like_a_solution_is_refused_without_raising(
    fields: dict[str, Any],
) -> None:
    challenges = FallbackChallenges(Secret(SECRET), cost=COST, ttl=TTL, clock=FakeClock())
    payload = base64.b64encode(json.dumps(fields).encode()).decode()
    check = challenges.check(payload, issued_after=0)
    assert not check.ok and check.key == ""


def test_the_secret_never_shows(challenges: FallbackChallenges) -> None:
    assert SECRET not in repr(challenges) and SECRET not in str(vars(challenges))
    assert SECRET not in json.dumps(challenges.issue())


def test_bad_arguments_are_refused_at_construction() -> None:
    with pytest.raises(TypeError):
        FallbackChallenges(SECRET, cost=COST, ttl=TTL)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cost"):
        FallbackChallenges(Secret(SECRET), cost=0, ttl=TTL)
    with pytest.raises(ValueError, match="ttl"):
        FallbackChallenges(Secret(SECRET), cost=COST, ttl=float("inf"))
