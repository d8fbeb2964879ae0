"""The tokens a vendor's fake knows: each good once, and only within the vendor's lifetime."""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Any

from failopen.clock import Clock
from failopen.testing.providers._minted import decode_minted

__all__ = ["DOCUMENTED", "Lifetime", "Redemption", "Solve", "TokenBook", "check_claims"]


class Lifetime(enum.Enum):
    """``token_lifetime=DOCUMENTED``: the lifetime the vendor documents for its tokens."""

    DOCUMENTED = "documented"


DOCUMENTED = Lifetime.DOCUMENTED

# The claims a solve can carry, and the types they must have (a minted token's too).
_CLAIM_TYPES: dict[str, tuple[type, ...]] = {
    "hostname": (str,), "action": (str,), "cdata": (str,), "site_key": (str,),
    "score": (int, float), "browser_error": (bool,),
}


@dataclass(frozen=True)
class Solve:
    """One solved challenge as the vendor remembers it: when, where, and what it found."""

    created_at: float
    hostname: str = "localhost"
    action: str | None = None
    cdata: str | None = None
    #: The site key the widget ran with; None: the fake's own ``public_key``.
    site_key: str | None = None
    score: float | None = None
    browser_error: bool = False


class Redemption(enum.Enum):
    """What verifying a token found."""

    VALID = "valid"
    UNKNOWN = "unknown"  # never issued: junk, a forgery
    DUPLICATE = "duplicate"  # verified before
    EXPIRED = "expired"  # first verified after its lifetime


def check_claims(vendor: str, allowed: Collection[str], given: dict[str, Any]) -> dict[str, Any]:
    """``given`` minus the unset (None) options; TypeError for one ``vendor``'s tokens lack."""
    claims = {name: value for name, value in given.items() if value is not None}
    for name, value in claims.items():
        if name not in allowed:
            raise TypeError(f"{vendor} tokens carry no {name!r}; they carry "
                            f"{', '.join(sorted(allowed))}")
        if not isinstance(value, _CLAIM_TYPES[name]) or (name == "score" and value is True):
            kinds = " or ".join(kind.__name__ for kind in _CLAIM_TYPES[name])
            raise TypeError(f"{name} must be {kinds}, not {value!r}")
    if not 0.0 <= claims.get("score", 0.0) <= 1.0:
        raise ValueError(f"score runs from 0.0 to 1.0, got {claims['score']!r}")
    return claims


class TokenBook:
    """Known tokens and which were verified; thread-safe (a served fake answers in threads)."""

    def __init__(
        self, vendor: str, key: Callable[[], str], clock: Clock, lifetime: float | None,
        check: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> None:
        # The key is asked for at each use: a test may change the fake's private_key.
        self.vendor, self.key, self.clock, self.lifetime = vendor, key, clock, lifetime
        self._check = check
        self._lock = threading.Lock()
        self._tokens: dict[str, Solve] = {}
        self._redeemed: set[str] = set()

    def add(self, token: str, claims: dict[str, Any]) -> None:
        """Know ``token``, solved now, never verified."""
        with self._lock:
            self._tokens[token] = Solve(self.clock.time(), **claims)
            self._redeemed.discard(token)

    def renew(self) -> None:
        """Forget every verification; every known token is solved anew, now."""
        now = self.clock.time()
        with self._lock:
            self._redeemed.clear()
            self._tokens = {token: replace(solve, created_at=now)
                            for token, solve in self._tokens.items()}

    def redeem(self, token: str) -> tuple[Redemption, Solve | None]:
        """Verify ``token`` once: the first verification uses it up, in time or not."""
        now = self.clock.time()
        with self._lock:
            solve = self._tokens.get(token)
            if solve is None:
                solve = self._minted(token, now)
            if solve is None:
                return Redemption.UNKNOWN, None
            if token in self._redeemed:
                return Redemption.DUPLICATE, solve
            self._redeemed.add(token)
        if self.lifetime is not None and now - solve.created_at >= self.lifetime:
            return Redemption.EXPIRED, solve
        return Redemption.VALID, solve

    def _minted(self, token: str, now: float) -> Solve | None:
        # A solve minted in another process (mint_token): its lifetime begins when first seen.
        minted = decode_minted(self.vendor, self.key(), token)
        if minted is None:
            return None
        try:
            solve = Solve(now, **self._check(minted))
        except (TypeError, ValueError):
            return None
        self._tokens[token] = solve
        return solve
