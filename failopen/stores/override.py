"""An operator's override, and the rule that forcing enforcement off always ends.

Forcing off lasts an hour when no ttl is given and at most seven days; forcing on may last until
lifted. The rule lives in :class:`Override` itself, so an override placed by any path (CLI, Django
command, either HTTP route) or read from any store (a file or Redis record an older version or a
hand wrote) obeys it: an endless or too-long force-off is a StoreError, never a bypass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from failopen.exceptions import StoreError

__all__ = [
    "CLOCK_SKEW",
    "FORCE_OFF_DEFAULT_TTL",
    "FORCE_OFF_MAX_TEXT",
    "FORCE_OFF_MAX_TTL",
    "FORCE_ON_MAX_TTL",
    "MAX_REASON",
    "Override",
]

MAX_REASON = 500
_MAX_SET_BY = 200

#: Seconds a forced-off override lasts when no ttl is given: protection never stays off by default.
FORCE_OFF_DEFAULT_TTL = 3600.0
#: The longest a forced-off override may last (7 days); place it again if the outage goes on.
FORCE_OFF_MAX_TTL = 7 * 86400.0
#: The longest ttl of a forced-on override (30 days); without a ttl it lasts until lifted.
FORCE_ON_MAX_TTL = 30 * 86400.0
# A stored force-off may exceed the maximum by this much (float rounding of set_at + ttl) ...
_ROUNDING = 1.0
# ... and end this much beyond now + the maximum (clocks of processes sharing a store).
CLOCK_SKEW = 60.0
FORCE_OFF_MAX_TEXT = "7 days (604800 s)"


@dataclass(frozen=True)
class Override:
    """An operator's decision: enforce or not, why, and until when (None: until lifted, which
    only forcing on may be; forcing off ends within seven days of ``set_at``, else StoreError)."""

    enforce: bool
    reason: str
    set_at: float
    expires_at: float | None = None
    #: Who placed it: ``cli``, ``admin-token``, ``django:<user id>`` (None: not recorded).
    set_by: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.enforce, bool):
            raise StoreError(
                f"override 'enforce' must be true or false, got {type(self.enforce).__name__}"
            )
        if not isinstance(self.reason, str):
            raise StoreError("override 'reason' must be a string")
        object.__setattr__(self, "reason", self.reason[:MAX_REASON])
        if self.set_by is not None and (not isinstance(self.set_by, str)
                                        or not self.set_by.isprintable()):
            raise StoreError("override 'set_by' must be a printable string")
        if self.set_by is not None:
            object.__setattr__(self, "set_by", self.set_by[:_MAX_SET_BY])
        # Times must be real seconds in 1970..9999 (the last second a datetime can show):
        # a NaN expiry never lapses, and NaN, infinity or 1e300 break every display of it.
        for name in ("set_at", "expires_at"):
            value: object = getattr(self, name)
            if value is None and name == "expires_at":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise StoreError(
                    f"override '{name}' must be seconds since the epoch, got {type(value).__name__}"
                )
            if not 0 <= value <= 253402300799:  # false for NaN too; no float(): 10**400 overflows
                shown = repr(value) if isinstance(value, float) else "an integer out of range"
                raise StoreError(
                    f"override '{name}' must be a finite time in 1970..9999, got {shown}"
                )
            object.__setattr__(self, name, float(value))
        if self.expires_at is not None and self.expires_at < self.set_at:
            raise StoreError("override 'expires_at' is before its 'set_at'")
        if not self.enforce:
            # The one rule for every way an override arrives (placed, or read from a store that
            # an older version or a hand wrote): forcing enforcement off always ends, and soon.
            if self.expires_at is None:
                raise StoreError(
                    "an override forcing enforcement off has no expiry; forcing off lasts at most "
                    f"{FORCE_OFF_MAX_TEXT}: place it again with a ttl"
                )
            if self.expires_at - self.set_at > FORCE_OFF_MAX_TTL + _ROUNDING:
                raise StoreError(
                    "an override forcing enforcement off lasts longer than the maximum of "
                    f"{FORCE_OFF_MAX_TEXT}: place it again with a shorter ttl"
                )

    def expired(self, now: float) -> bool:
        """True once the expiry has passed."""
        return self.expires_at is not None and now >= self.expires_at

    def to_json(self) -> dict[str, Any]:
        """The stored form."""
        stored: dict[str, Any] = {
            "enforce": self.enforce,
            "reason": self.reason,
            "set_at": self.set_at,
            "expires_at": self.expires_at,
        }
        if self.set_by is not None:
            stored["set_by"] = self.set_by
        return stored

    @classmethod
    def from_json(cls, data: Any) -> Override:
        """Parse the stored form; anything else is a StoreError, never a guess."""
        if not isinstance(data, dict):
            raise StoreError("stored override is not an object")
        try:
            # Values go in as stored: __post_init__ checks them (numbers only, never a string
            # coerced with float(), which would also let "nan" in).
            return cls(
                enforce=data["enforce"],
                reason=data.get("reason", ""),
                set_at=data["set_at"],
                expires_at=data.get("expires_at"),
                set_by=data.get("set_by"),
            )
        except KeyError as exc:
            raise StoreError(f"stored override is malformed (missing {exc})") from None
