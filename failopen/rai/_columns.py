"""The typed columns of a Parquet file: decoded JSON values checked against their Arrow type.

A value that does not have the column's type exactly is never coerced (pyarrow alone would
truncate 1.5 to an int64 and read true as 1.0): the cell is null and the value's index is
returned, so that the caller keeps the value as received in ``extra_fields``. Most batches hold
no such value; a check by the set of types present finds that without a Python test per value.

pyarrow arrives as an argument (``pa``, ``pc``): only ``_parquet.py`` imports it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from failopen.rai._arguments import parse_rfc3339
from failopen.rai.exceptions import RaiValidationError

__all__ = ["column", "stamps"]

_INT64 = (-(1 << 63), (1 << 63) - 1)
_FLOAT_INT = 1 << 1023  # larger ints do not fit a float64 (float() raises)


def _exact_float(v: int) -> bool:
    """An int a float64 holds exactly (past 2**53 most do not: 2**53 + 1 would change)."""
    return -_FLOAT_INT < v < _FLOAT_INT and float(v) == v


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)
# What Arrow's cast may parse (RFC 3339 up to microseconds, upper-case T and Z); anything else,
# lower-case "t" or nanoseconds included, goes through parse_rfc3339, one value at a time.
_ARROW_STAMP = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})$"
_PAST_MICROS = re.compile(r"\.\d{6}\d*?[1-9]")


def _fits(pa: Any, arrow_type: Any) -> Callable[[Any], bool]:
    """Whether a decoded JSON value has the column's type exactly (None: always)."""
    types = pa.types
    if types.is_string(arrow_type) or types.is_timestamp(arrow_type):
        return lambda v: type(v) is str
    if types.is_int64(arrow_type):
        low, high = _INT64
        return lambda v: type(v) is int and low <= v <= high  # bool is not an int here
    if types.is_float64(arrow_type):
        return lambda v: type(v) is float or (type(v) is int and _exact_float(v))
    if types.is_boolean(arrow_type):
        return lambda v: type(v) is bool
    if types.is_list(arrow_type):
        item = _fits(pa, arrow_type.value_type)
        return lambda v: type(v) is list and all(x is not None and item(x) for x in v)
    raise ValueError(f"no check for {arrow_type}")  # structs are read by _struct


def _array(pa: Any, values: list[Any], arrow_type: Any, bad: list[int]) -> Any:
    """``pa.array``; a string that is not valid UTF-8 (a lone surrogate from a "\\ud800"
    escape) becomes null, its index added to ``bad``: one such value must not fail the file."""
    try:
        return pa.array(values, arrow_type)
    except UnicodeEncodeError:
        pass
    values = list(values)
    for index, value in enumerate(values):
        try:
            pa.array([value], arrow_type)
        except UnicodeEncodeError:
            values[index] = None
            bad.append(index)
    return pa.array(values, arrow_type)


def _clean(pa: Any, arrow_type: Any, values: list[Any]) -> bool:
    """A quick check, by the sets of types present, that every value fits ``arrow_type``
    (False: check one value at a time). Ints past int64 still reach ``pa.array``, which raises."""
    types = set(map(type, values))
    types.discard(type(None))
    if pa.types.is_list(arrow_type):
        if not types <= {list}:
            return False
        items = list(itertools.chain.from_iterable(v for v in values if v is not None))
        return _clean_items(pa, arrow_type.value_type, items)
    if pa.types.is_struct(arrow_type):
        if not types <= {dict}:
            return False
        cells = [v for v in values if v is not None]
        names = [arrow_type.field(i).name for i in range(arrow_type.num_fields)]
        return all(map(frozenset(names).issuperset, cells)) and all(
            _clean(pa, arrow_type.field(name).type, [cell.get(name) for cell in cells])
            for name in names
        )
    if int in types and pa.types.is_float64(arrow_type):  # rare: scores are sent as 0.5
        return types <= {int, float} and all(_exact_float(v) for v in values if type(v) is int)
    return types <= _ALLOWED[str(arrow_type)]


def _clean_items(pa: Any, arrow_type: Any, items: list[Any]) -> bool:
    return None not in items and _clean(pa, arrow_type, items)


_ALLOWED: dict[str, set[type]] = {
    "string": {str},
    "int64": {int},
    "double": {float, int},
    "bool": {bool},
}
# What pa.array raises for a value _clean let through (an int past int64, a lone surrogate).
_ARRAY_ERRORS = (OverflowError, UnicodeEncodeError, ValueError, TypeError)


def _plain(pa: Any, arrow_type: Any, values: list[Any]) -> tuple[Any, list[int]]:
    if _clean(pa, arrow_type, values):
        try:
            return pa.array(values, arrow_type), []
        except _ARRAY_ERRORS:
            pass
    fits = _fits(pa, arrow_type)
    bad = [i for i, v in enumerate(values) if v is not None and not fits(v)]
    if bad:
        values = list(values)
        for index in bad:
            values[index] = None
    if pa.types.is_float64(arrow_type):
        values = [float(v) if type(v) is int else v for v in values]  # big ints: not via int64
    return _array(pa, values, arrow_type, bad), bad


def _struct(pa: Any, arrow_type: Any, values: list[Any]) -> tuple[Any, list[int]]:
    if _clean(pa, arrow_type, values):
        try:
            return pa.array(values, arrow_type), []
        except _ARRAY_ERRORS:
            pass
    subfields = [(arrow_type.field(i).name, _fits(pa, arrow_type.field(i).type))
                 for i in range(arrow_type.num_fields)]  # fmt: skip
    known = frozenset(name for name, _ in subfields)
    bad = []
    cells: list[Any] = []
    for index, value in enumerate(values):
        if value is None:
            cells.append(None)
            continue
        if type(value) is not dict:
            bad.append(index)
            cells.append(None)
            continue
        cell = {}
        exact = known.issuperset(value)
        for name, fits in subfields:
            sub = value.get(name)
            if sub is not None and not fits(sub):
                sub, exact = None, False
            cell[name] = sub
        if not exact:
            bad.append(index)
        cells.append(cell)
    return _array(pa, cells, arrow_type, bad), bad


def _micros(value: str) -> int:
    return (parse_rfc3339(value) - _EPOCH) // _MICROSECOND


def _stamps(pa: Any, pc: Any, arrow_type: Any, values: list[Any]) -> tuple[Any, list[int]]:
    strings, bad = _plain(pa, pa.string(), values)
    array, inexact = stamps(pa, pc, arrow_type, strings)
    return array, sorted({*bad, *inexact})


def stamps(pa: Any, pc: Any, arrow_type: Any, strings: Any) -> tuple[Any, list[int]]:
    """Timestamps of a string array: Arrow's cast when every one is plain RFC 3339, else one at
    a time; the indexes of those not held exactly (malformed: null; past microseconds: cut)."""
    bad: list[int] = []
    matches = pc.match_substring_regex(strings, _ARROW_STAMP)
    if pc.all(matches, min_count=0).as_py():
        try:
            return pc.cast(strings, arrow_type), bad
        except pa.ArrowInvalid:
            pass  # e.g. 2024-02-30: find which, one at a time
    micros: list[int | None] = []
    for index, text in enumerate(strings.to_pylist()):
        if text is None:
            micros.append(None)
            continue
        try:
            micros.append(_micros(text))
        except (RaiValidationError, OverflowError):
            micros.append(None)
            bad.append(index)
            continue
        if _PAST_MICROS.search(text):  # the column holds it cut to microseconds
            bad.append(index)
    return pa.array(micros, arrow_type), bad


def column(pa: Any, pc: Any, arrow_type: Any, values: list[Any]) -> tuple[Any, list[int]]:
    """The Arrow array of ``values`` (decoded JSON, None where missing) and the indexes of the
    values it does not hold exactly (null, or a timestamp cut to microseconds)."""
    if pa.types.is_timestamp(arrow_type):
        return _stamps(pa, pc, arrow_type, values)
    if pa.types.is_struct(arrow_type):
        return _struct(pa, arrow_type, values)
    return _plain(pa, arrow_type, values)
