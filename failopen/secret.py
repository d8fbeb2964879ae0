"""Secret settings: values shown as ``***`` on every path that walks a Config, read on purpose.

The private key, the admin token and the store password are held in :class:`Secret`, not in a
``str``: ``repr``, ``str``, f-strings, ``dataclasses.asdict``, ``vars``, ``copy`` and
``dataclasses.replace`` all see ``***``, JSON encoding refuses it, and pickling is refused (a
pickle would carry it in clear). The code that uses a secret calls :meth:`Secret.reveal`.

``Config(private_key="...")`` still takes a plain string (``_config_fields.SecretSetting`` wraps
it), and an empty or blank string means "not set", as an empty ``FAILOPEN_*`` variable does:
Django settings written as ``"ADMIN_TOKEN": os.environ.get("X", "")`` leave the setting unset,
not "too short".
"""

from __future__ import annotations

import hmac
from typing import Any, NoReturn

__all__ = ["Secret", "as_secret", "reveal"]

_MASK = "***"


class Secret:
    """A credential that shows as ``***``; :meth:`reveal` returns the value itself."""

    __slots__ = ("__value",)
    __value: str

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError(f"Secret() takes a str, got {type(value).__name__}")
        object.__setattr__(self, "_Secret__value", value)

    def reveal(self) -> str:
        """The secret itself: call it only where the secret is used, never to show it."""
        return self.__value

    def __repr__(self) -> str:
        return f"Secret({_MASK!r})"

    def __str__(self) -> str:
        return _MASK

    def __eq__(self, other: object) -> bool:
        # Constant time: Config equality must not tell how much of a token matched.
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self.__value.encode("utf-8", "surrogatepass"),
                                   other.__value.encode("utf-8", "surrogatepass"))

    def __hash__(self) -> int:
        return hash((Secret, self.__value))

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("a Secret cannot be changed")

    def __copy__(self) -> Secret:
        return self  # immutable: copy.copy / deepcopy / dataclasses.asdict keep the wrapper

    def __deepcopy__(self, memo: dict[int, Any]) -> Secret:
        return self

    def __reduce__(self) -> NoReturn:
        raise TypeError(
            "a failopen Secret is not pickled: the pickle would carry it in clear. Build the "
            "Config in the process that uses it (Config.from_env(), or the adapter's settings)"
        )


def reveal(value: Secret | None) -> str | None:
    """The secret's value, or None when it is not set."""
    return value.reveal() if value is not None else None


def as_secret(value: object) -> Secret | None:
    """``value`` as a Secret: a string is wrapped, blank or None is unset (TypeError otherwise)."""
    if value is None:
        return None
    if isinstance(value, Secret):
        # Secret(os.environ.get("X", "")) means unset too, as the bare string would.
        return value if value.reveal().strip() else None
    if isinstance(value, str):
        # "" means unset, as an empty FAILOPEN_* variable does (never "too short").
        return Secret(value) if value.strip() else None
    raise TypeError(f"expected a string, got {type(value).__name__}")
