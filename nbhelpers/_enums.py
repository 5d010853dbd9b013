"""Strings at the boundary: turn a user's string into a member of one of the course's enums."""
from __future__ import annotations

import enum
from typing import TypeVar

E = TypeVar("E", bound=enum.Enum)


def enum_member(cls: type[E], value: E | str, what: str) -> E:
    """``value`` if it is a member of ``cls``, else the member whose value is the string
    ``value`` (case and surrounding spaces ignored); otherwise a ValueError naming ``what`` and
    listing the accepted strings."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        try:
            return cls(value.strip().lower())
        except ValueError:
            pass
    known = ", ".join(repr(m.value) for m in cls)
    raise ValueError(f"unknown {what} {value!r}; expected one of: {known} (or a {cls.__name__} member)")
