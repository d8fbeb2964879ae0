"""The self-hosted challenge: ALTCHA protocol v1 (SHA-256 proof of work, HMAC-signed).

:meth:`FallbackChallenges.issue` answers what the ALTCHA widget (and failopen's solver) expects;
the browser finds the number whose ``SHA-256(salt + number)`` is the challenge and sends back
the base64 JSON payload that :meth:`FallbackChallenges.check` reads. The signature is an HMAC of
the challenge under ``FAILOPEN_FALLBACK_SECRET``, and the challenge a hash of the salt, so the
salt's parameters (``expires``, and ``issued`` and ``off_since_ms``, which failopen adds) cannot
be changed without breaking both: a challenge fetched before the current outage began is refused,
and so is one issued in an outage that began before enforcement last resumed (an earlier outage,
however short the gap between the two).

The challenge is made by the ``altcha`` package (:func:`altcha.v1.create_challenge`) and checked
with its hash functions. Not with :func:`altcha.v1.verify_solution`: it compares the signature
with ``==`` (not in constant time), reads the wall clock itself (tests inject one), and answers
one boolean where the logs want the reason. No I/O either way; ``altcha`` is imported when a
:class:`FallbackChallenges` is built, never by ``import failopen``.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import hashlib
import hmac
import json
import math
from dataclasses import dataclass
from typing import Any, Final

from failopen.clock import SYSTEM_CLOCK, Clock
from failopen.secret import Secret

__all__ = ["MAX_PAYLOAD", "FallbackChallenges", "SolutionCheck"]

#: Longest payload read, in characters: an honest one is about 300.
MAX_PAYLOAD = 4096
_ALGORITHM: Final = "SHA-256"
_FIELDS = frozenset({"algorithm", "challenge", "number", "salt", "signature"})
# A SHA-256 hex digest: what the challenge and the signature must look like before any hashing.
_HEX64 = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class SolutionCheck:
    """What :meth:`FallbackChallenges.check` found. ``key`` and ``expires_at`` (epoch seconds)
    identify the challenge for single use, ``issued_at`` (epoch seconds, whole) says when it was
    issued; all are set only when ``ok``."""

    ok: bool
    reason: str
    key: str = ""
    expires_at: float = 0.0
    issued_at: float = 0.0


_MALFORMED = SolutionCheck(False, "malformed")
_BAD_SIGNATURE = SolutionCheck(False, "bad signature")
_WRONG_ANSWER = SolutionCheck(False, "wrong answer")
_EXPIRED = SolutionCheck(False, "expired")
_TOO_EARLY = SolutionCheck(False, "issued while enforcing")
_EARLIER_OUTAGE = SolutionCheck(False, "issued in an earlier outage")


class FallbackChallenges:
    """Issues ALTCHA challenges and checks their solutions, under one secret."""

    def __init__(self, secret: Secret, *, cost: int, ttl: float,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        from altcha import v1

        if not isinstance(secret, Secret) or not secret.reveal():
            raise TypeError("FallbackChallenges needs the secret as a failopen Secret")
        if isinstance(cost, bool) or not isinstance(cost, int) or cost < 1:
            raise ValueError(f"cost must be a whole number of at least 1, got {cost!r}")
        if not math.isfinite(ttl) or ttl <= 0:
            raise ValueError(f"ttl must be a number of seconds above 0, got {ttl!r}")
        self.cost = cost
        self.ttl = float(ttl)
        self._clock = clock
        self._create = v1.create_challenge
        self._options = v1.ChallengeOptions
        self._secret = secret
        # Keyed once; each check copies it. No attribute holds the secret in clear.
        self._mac = hmac.new(secret.reveal().encode("utf-8", "surrogatepass"),
                             digestmod=hashlib.sha256)

    def __repr__(self) -> str:
        return f"FallbackChallenges(cost={self.cost}, ttl={self.ttl:g})"

    def issue(self, *, off_since: float | None = None) -> dict[str, Any]:
        """A new challenge as the endpoint answers it: ``algorithm``, ``challenge``,
        ``maxnumber``, ``salt`` (with ``expires``, ``issued`` and, given ``off_since``, the
        start of the outage it is issued in as ``off_since_ms``), ``signature``."""
        now = self._clock.time()
        params = {"issued": str(math.floor(now)), "issued_ms": str(math.floor(now * 1000))}
        if off_since is not None and math.isfinite(off_since):
            # Binds the challenge to this outage: one from an outage that began before
            # enforcement last resumed is refused (check's ``began_after``).
            params["off_since_ms"] = str(max(0, math.floor(off_since * 1000)))
        # ALTCHA writes whole seconds; expiry rounds up so a challenge lives at least ``ttl``.
        expires = datetime.datetime.fromtimestamp(math.ceil(now + self.ttl),
                                                  tz=datetime.timezone.utc)
        made = self._create(self._options(
            algorithm=_ALGORITHM, max_number=self.cost,
            hmac_key=self._secret.reveal().encode("utf-8", "surrogatepass"), expires=expires,
            # ``issued`` in whole seconds (as challenges issued before have it) and to the
            # millisecond: the fleet's record of used solutions begins at a millisecond (Redis's
            # ``fallback:since``), and a challenge issued just after it, in its second, must not
            # read as issued before it.
            params=params))
        return {"algorithm": made.algorithm, "challenge": made.challenge,
                "maxnumber": made.max_number, "salt": made.salt, "signature": made.signature}

    def check(self, payload: str, *, issued_after: float,
              began_after: float | None = None) -> SolutionCheck:
        """Whether ``payload`` (the widget's base64 JSON) solves a challenge this secret signed,
        unexpired and issued at or after ``issued_after`` (epoch seconds; ``issued`` is kept in
        whole seconds, so it is compared with ``issued_after`` rounded down) in an outage that
        began at or after ``began_after`` (when enforcement last resumed; None: no bound).
        Never raises."""
        try:
            return self._check(payload, issued_after, began_after)
        except Exception:  # a payload no rule above foresaw is still only a refusal
            return _MALFORMED

    def _check(self, payload: str, issued_after: float,
               began_after: float | None) -> SolutionCheck:
        fields = _decode(payload)
        if fields is None:
            return _MALFORMED
        challenge, salt, number, signature = (
            fields["challenge"], fields["salt"], fields["number"], fields["signature"])
        mac = self._mac.copy()
        mac.update(challenge.encode())
        expected = mac.hexdigest()
        if not hmac.compare_digest(expected, signature):
            return _BAD_SIGNATURE
        # The delimiter ALTCHA appends against parameter splicing, as its verify_solution does.
        hashed = salt if salt.endswith("&") else salt + "&"
        answer = hashlib.sha256(f"{hashed}{number}".encode()).hexdigest()
        if not hmac.compare_digest(answer, challenge):
            return _WRONG_ANSWER
        # Signed and solved: the salt is one this secret issued, so its parameters are ours.
        expires, issued, began = _salt_times(salt)
        if expires is None or issued is None:
            return _MALFORMED  # signed by this secret, but not by issue(): another tool's
        if self._clock.time() > expires:
            return _EXPIRED
        if not _issued_at_or_after(issued, issued_after):
            return _TOO_EARLY  # also a NaN issued_after: refuse rather than guess
        if began_after is not None and not _began_at_or_after(began, issued, began_after):
            return _EARLIER_OUTAGE
        return SolutionCheck(True, "ok", hashlib.sha256(challenge.encode()).hexdigest(),
                             float(expires), issued.seconds)


def _decode(payload: Any) -> dict[str, Any] | None:
    """The payload's fields, each of the type and shape an honest one has; None otherwise."""
    if not isinstance(payload, str) or not payload or len(payload) > MAX_PAYLOAD:
        return None
    try:
        data = json.loads(base64.b64decode(payload, validate=True))
    except (ValueError, binascii.Error, RecursionError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or not data.keys() >= _FIELDS:
        return None
    number, salt = data["number"], data["salt"]
    if (data["algorithm"] != _ALGORITHM
            or isinstance(number, bool) or not isinstance(number, int) or number < 0
            or not isinstance(salt, str) or not salt.isascii()
            or not _hex64(data["challenge"]) or not _hex64(data["signature"])):
        return None
    return data


@dataclass(frozen=True)
class _Issued:
    """When a challenge was issued: whole seconds, and milliseconds where the salt has them."""

    whole: int
    ms: int | None

    @property
    def seconds(self) -> float:
        return self.ms / 1000 if self.ms is not None else float(self.whole)


def _issued_at_or_after(issued: _Issued, moment: float) -> bool:
    """At the precision the challenge carries: to the millisecond, else the second."""
    if issued.ms is not None and math.isfinite(moment):
        return issued.ms >= math.floor(moment * 1000)
    return issued.whole >= _whole_seconds(moment)


def _began_at_or_after(began: int | None, issued: _Issued, moment: float) -> bool:
    """Whether the outage a challenge was issued in began at or after ``moment``, to the
    millisecond. A challenge without ``off_since_ms`` (issued by a failopen before it) is read
    as if its outage began when it was issued: later than it did, the lenient side, for the
    ``ttl`` such a challenge lives. NaN: refused."""
    if not math.isfinite(moment):
        return moment < 0  # -inf: no bound; NaN, +inf: none passes
    if began is None:
        return _issued_at_or_after(issued, moment)
    return began >= math.floor(moment * 1000)


def _whole_seconds(moment: float) -> float:
    """``moment`` rounded down to the second, as ``issued`` is written (infinities and NaN as
    they are: -inf admits every challenge, NaN none)."""
    return math.floor(moment) if math.isfinite(moment) else moment


def _hex64(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and _HEX64.issuperset(value)


def _salt_times(salt: str) -> tuple[int | None, _Issued | None, int | None]:
    """``expires``, ``issued`` and ``off_since_ms`` from the salt's parameters (None: absent,
    given twice, or not whole numbers; ``issued_ms`` only where it agrees with ``issued``, and
    ``off_since_ms`` only where it is not after it). Read as written, without percent-decoding:
    ours are plain digits."""
    _nonce, question, query = salt.partition("?")
    if not question:
        return None, None, None
    values: dict[str, list[str]] = {}
    for item in query.split("&"):
        name, _equals, value = item.partition("=")
        values.setdefault(name, []).append(value)

    def one(name: str) -> int | None:
        given = values.get(name, [])
        return int(given[0]) if len(given) == 1 and given[0].isdigit() else None

    whole, ms = one("issued"), one("issued_ms")
    if whole is None:
        return one("expires"), None, None
    # A challenge issued before issue 31 has no milliseconds; one whose two disagree is not
    # one issue() made: the coarser reading, on the safe side.
    issued = _Issued(whole, ms if ms is not None and ms // 1000 == whole else None)
    # An outage that began after its challenge was issued is not one issue() wrote: read as
    # beginning when the challenge was issued (the safe side, as for a challenge without it).
    began = one("off_since_ms")
    return one("expires"), issued, began if began is not None \
        and began <= whole * 1000 + 999 else None
