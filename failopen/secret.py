"""Secret settings: values shown as ``***`` on every path that walks a Config, read on purpose.

The private key, the admin token and the store password are held in :class:`Secret`, not in a
``str``: ``repr``, ``str``, f-strings, ``dataclasses.asdict``, ``vars``, ``copy`` and
``dataclasses.replace`` all see ``***``, JSON encoding refuses it, and pickling is refused (a
pickle would carry it in clear). The code that uses a secret calls :meth:`Secret.reveal`.

``Config(private_key="...")`` still takes a plain string (:class:`SecretSetting` wraps it), and an
empty or blank string means "not set", as an empty ``FAILOPEN_*`` variable does: Django settings
written as ``"ADMIN_TOKEN": os.environ.get("X", "")`` leave the setting unset, not "too short".
"""

from __future__ import annotations

import hmac
from typing import Any, NoReturn, overload

__all__ = ["Secret", "SecretSetting", "reveal"]

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


def _wrapped(value: object) -> Secret | None:
    if value is None:
        return None
    if isinstance(value, Secret):
        # Secret(os.environ.get("X", "")) means unset too, as the bare string would.
        return value if value.reveal().strip() else None
    if isinstance(value, str):
        # "" means unset, as an empty FAILOPEN_* variable does (never "too short").
        return Secret(value) if value.strip() else None
    raise TypeError(f"expected a string, got {type(value).__name__}")


class SecretSetting:
    """A Config field that holds a :class:`Secret` (a ``str`` given is wrapped; blank: None)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: Any) -> None: ...

    @overload
    def __get__(self, instance: object, owner: Any) -> Secret | None: ...

    def __get__(self, instance: object | None, owner: Any) -> Secret | None:
        if instance is None:
            return None  # the field's default, as dataclasses read it
        value: Secret | None = instance.__dict__.get(self.name)
        return value

    def __set__(self, instance: object, value: str | Secret | None) -> None:
        try:
            instance.__dict__[self.name] = _wrapped(value)
        except TypeError:
            # Never echo the value: it is meant to be a credential.
            from failopen._config_fields import env_name
            from failopen.exceptions import ConfigError

            raise ConfigError(f"{env_name(self.name)}: expected a string, got "
                              f"{type(value).__name__}") from None
