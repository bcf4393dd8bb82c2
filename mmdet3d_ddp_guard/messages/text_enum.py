"""The base of the package's enums (the guard's modes, the stall guard's phases): members
that are their text.

A member is its value, a plain string, everywhere text is made of it: it compares and hashes
as the string, and ``str``, formatting, ``repr`` and ``json.dumps`` give exactly the
string's (Enum's own write ``Mode.COMPLETE``, and its formatting changed in Python 3.12), so
that logs, messages, snapshots and JSON files read the same as when these were strings.
"""
from enum import Enum


class TextEnum(str, Enum):
    """An enum whose members read as their values (subclass it with members)."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(self, spec)

    def __repr__(self) -> str:
        return str.__repr__(self)
