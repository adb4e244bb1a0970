"""Exact parsing and formatting of byte sizes and parameter counts.

No floats anywhere: a literal such as ``'1.5TiB'`` or ``'7.5e9'`` is split into its digit strings and
turned into an exact :class:`fractions.Fraction`; the result must be a whole number.

Unit letters (decided, and documented in ``docs/memory-model.md``):

* Byte sizes follow SI / IEC strictly and case-insensitively. ``k``/``kB``, ``M``/``MB``, ``G``/``GB``,
  ``T``/``TB``, ``P``/``PB``, ``E``/``EB`` are **decimal** (10**3 ... 10**18); the binary units need the
  ``i``: ``Ki``/``KiB``, ``Mi``/``MiB``, ``Gi``/``GiB``, ``Ti``/``TiB``, ``Pi``/``PiB``, ``Ei``/``EiB``
  (2**10 ... 2**60). ``B`` (any case) is bytes, never bits. So ``'80G'`` and ``'80GB'`` are 80 * 10**9
  and ``'80GiB'`` is 80 * 2**30 -- there is no JEDEC "KB = 1024" reading.
* Parameter counts take ``K`` (thousand), ``M`` (million), ``B`` (billion), ``T`` (trillion), any case.
  ``G`` is rejected: in a parameter count it is ambiguous with "GB".

Digit separators: ``_`` between digits (as in Python literals) or ``,`` in groups of three
(``'8,030,261,248'``). ``'1,5GB'`` is rejected, never read as 1.5 or 15.
"""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction

__all__ = [
    "UnitError",
    "BYTE_UNITS",
    "PARAMETER_SUFFIXES",
    "parse_bytes",
    "parse_parameter_count",
    "format_bytes",
    "format_bytes_decimal",
    "format_bytes_with_count",
    "format_count",
    "format_parameters",
]


class UnitError(ValueError):
    """A byte size or parameter count that cannot be read exactly. The message quotes the text."""


# Canonical unit spelling -> bytes. Lookup is case-insensitive (see _BYTE_LOOKUP).
BYTE_UNITS: dict[str, int] = {
    "B": 1,
    "kB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "PB": 10**15,
    "EB": 10**18,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
    "PiB": 2**50,
    "EiB": 2**60,
}

_BYTE_LOOKUP: dict[str, int] = {"": 1, "byte": 1, "bytes": 1}
for _name, _factor in BYTE_UNITS.items():
    _BYTE_LOOKUP[_name.lower()] = _factor
    if _name != "B":
        _BYTE_LOOKUP[_name[:-1].lower()] = _factor  # 'G' == 'GB', 'Gi' == 'GiB'

PARAMETER_SUFFIXES: dict[str, int] = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
_PARAMETER_LOOKUP: dict[str, int] = {"": 1, **{k.lower(): v for k, v in PARAMETER_SUFFIXES.items()}}

_BYTE_HINT = "expected a number with an optional unit (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)"
_PARAMETER_HINT = "expected a number with an optional suffix K, M, B or T (thousand, million, billion, trillion)"

# A number: integer part with optional '_' or ',' separators, optional fraction, optional exponent.
_NUMBER = re.compile(
    r"""
    (?P<sign>[+-]?)
    (?:
        (?P<int>\d{1,3}(?:,\d{3})+|\d+(?:_\d+)*)(?:\.(?P<frac1>\d+))?
      | \.(?P<frac2>\d+)
    )
    (?:[eE](?P<exp>[+-]?\d+))?
    \s*
    (?P<unit>[A-Za-z]*)
    """,
    re.VERBOSE | re.ASCII,
)

# Guard against '1e999999999' turning into a gigantic int (the parser runs inside a language server).
_MAX_EXPONENT = 4000
_MAX_DIGITS = 4000


def _quote(text: object) -> str:
    return f"'{text}'"


def _parse_number(text: str, what: str, hint: str) -> tuple[Fraction, str]:
    """Split ``text`` into an exact value and its (unconverted) unit letters."""
    match = _NUMBER.fullmatch(text.strip())
    if match is None:
        raise UnitError(f"invalid {what} {_quote(text)}: {hint}")
    integer = (match["int"] or "").replace("_", "").replace(",", "")
    fraction = match["frac1"] or match["frac2"] or ""
    exponent_text = match["exp"] or "0"
    if len(integer) + len(fraction) > _MAX_DIGITS or len(exponent_text) > 6:
        raise UnitError(f"invalid {what} {_quote(text)}: number is too long")
    exponent = int(exponent_text) - len(fraction)
    if abs(exponent) > _MAX_EXPONENT:
        raise UnitError(f"invalid {what} {_quote(text)}: exponent is out of range")
    mantissa = int(integer + fraction or "0")
    value = Fraction(mantissa * 10**exponent) if exponent >= 0 else Fraction(mantissa, 10**-exponent)
    if match["sign"] == "-":
        value = -value
    return value, match["unit"]


def _fraction_text(value: Fraction) -> str:
    """An exact, readable rendering of a Fraction for error messages."""
    if value.denominator == 1:
        return _int_to_str(value.numerator)
    # Terminating decimals (denominators 2**a 5**b) print exactly; others as p/q.
    d = value.denominator
    twos = fives = 0
    while d % 2 == 0:
        d //= 2
        twos += 1
    while d % 5 == 0:
        d //= 5
        fives += 1
    if d != 1:
        return f"{value.numerator}/{value.denominator}"
    places = max(twos, fives)
    scaled = value * 10**places
    sign = "-" if scaled < 0 else ""
    digits = _int_to_str(abs(scaled.numerator)).rjust(places + 1, "0")
    return f"{sign}{digits[:-places]}.{digits[-places:]}".rstrip("0")


def _coerce_non_string(value: object, what: str) -> Fraction:
    if isinstance(value, bool):
        raise UnitError(f"invalid {what} {_quote(value)}: a boolean is not a number")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise UnitError(f"invalid {what} {_quote(value)}: not a finite number")
        return Fraction(value)
    if isinstance(value, float):
        raise UnitError(
            f"invalid {what} {_quote(value)}: floats are not exact; pass an int or the literal text"
        )
    raise UnitError(f"invalid {what} {_quote(value)}: expected a string or an int, got {type(value).__name__}")


def parse_bytes(text: str | int) -> int:
    """Parse a byte size exactly: ``'80GB'`` -> 80 * 10**9, ``'80GiB'`` -> 80 * 2**30, ``'80e9'``, ``85899345920``.

    Decimal units (kB, MB, GB, TB, PB, EB and bare k, M, G, T, P, E) are powers of 1000; binary units
    need the ``i`` (KiB ... EiB, or Ki ... Ei). Case-insensitive. The result must be a non-negative
    whole number of bytes. ``int`` (and ``decimal.Decimal``) pass through; ``bool`` and ``float`` are
    rejected. Raises :class:`UnitError` quoting the text.
    """
    what = "byte size"
    if not isinstance(text, str):
        value = _coerce_non_string(text, what)
        unit = 1
    else:
        value, unit_text = _parse_number(text, what, _BYTE_HINT)
        found_unit = _BYTE_LOOKUP.get(unit_text.lower())
        if found_unit is None:
            raise UnitError(f"invalid {what} {_quote(text)}: {_BYTE_HINT}")
        unit = found_unit
    result = value * unit
    if result < 0:
        raise UnitError(f"invalid {what} {_quote(text)}: must not be negative")
    if result.denominator != 1:
        raise UnitError(
            f"invalid {what} {_quote(text)}: {_fraction_text(result)} bytes is not a whole number of bytes"
        )
    return result.numerator


def parse_parameter_count(text: str | int) -> int:
    """Parse a parameter count exactly: ``'7B'``, ``'7.5e9'``, ``'70b'``, ``'350M'``, ``'8_030_261_248'``, ``'1.3k'``.

    Suffixes K, M, B, T (thousand, million, billion, trillion), case-insensitive; ``G`` is rejected.
    The result must be a whole number greater than zero. Raises :class:`UnitError` quoting the text.
    """
    what = "parameter count"
    if not isinstance(text, str):
        value = _coerce_non_string(text, what)
        suffix = 1
    else:
        value, suffix_text = _parse_number(text, what, _PARAMETER_HINT)
        found_suffix = _PARAMETER_LOOKUP.get(suffix_text.lower())
        if found_suffix is None:
            raise UnitError(f"invalid {what} {_quote(text)}: {_PARAMETER_HINT}")
        suffix = found_suffix
    result = value * suffix
    if result.denominator != 1:
        raise UnitError(
            f"invalid {what} {_quote(text)}: {_fraction_text(result)} is not a whole number of parameters"
        )
    if result <= 0:
        raise UnitError(f"invalid {what} {_quote(text)}: must be greater than zero")
    return result.numerator


# --------------------------------------------------------------------------------------------------
# Formatting (integer arithmetic only)

_BINARY_NAMES = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB")
_DECIMAL_NAMES = ("B", "kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB")
_PARAMETER_NAMES = ("", "K", "M", "B", "T")


def _int_to_str(n: int) -> str:
    """str(n) that also works past Python's int-to-str digit limit (sys.get_int_max_str_digits)."""
    if n < 0:
        return "-" + _int_to_str(-n)
    if n.bit_length() <= 10_000:  # ~3010 digits, below the default 4300-digit limit
        return str(n)
    # Split on a power of ten of roughly half the digits and recurse.
    half = (n.bit_length() * 3 // 10) // 2
    high, low = divmod(n, 10**half)
    return _int_to_str(high) + _int_to_str(low).rjust(half, "0")


def _round_half_up(numerator: int, denominator: int) -> int:
    """round(numerator / denominator) with halves rounded up (away from zero), for numerator >= 0."""
    return (2 * numerator + denominator) // (2 * denominator)


def _require_int(n: object, name: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"{name} expects an int, got {n!r} ({type(n).__name__})")
    return n


def _scaled(n: int, base: int, count: int, places: int) -> tuple[int, int]:
    """Pick the unit index for ``n >= 0`` and return (index, value * 10**places rounded half up).

    Moves to the next unit when rounding reaches the base (1023.96 KiB -> 1.0 MiB).
    """
    index = 0
    while index + 1 < count and n >= base ** (index + 1):
        index += 1
    scale = 10**places
    value = _round_half_up(n * scale, base**index)
    if index > 0 and index + 1 < count and value >= base * scale:
        index += 1
        value = _round_half_up(n * scale, base**index)
    return index, value


def _fixed(value: int, places: int, strip: bool) -> str:
    """Render value / 10**places with ``places`` decimals (optionally stripping trailing zeros)."""
    if places == 0:
        return _int_to_str(value)
    whole, part = divmod(value, 10**places)
    text = f"{_int_to_str(whole)}.{_int_to_str(part).rjust(places, '0')}"
    if strip:
        text = text.rstrip("0").rstrip(".")
    return text


def format_bytes(n: int) -> str:
    """Binary units with one decimal: ``0 -> '0 B'``, ``1023 -> '1023 B'``, ``1536 -> '1.5 KiB'``.

    Exact (integer arithmetic, halves rounded up). Sizes past YiB stay in YiB. Negative sizes get a
    leading ``-``.
    """
    n = _require_int(n, "format_bytes")
    if n < 0:
        return "-" + format_bytes(-n)
    index, value = _scaled(n, 1024, len(_BINARY_NAMES), 1)
    if index == 0:
        return f"{_int_to_str(n)} B"
    return f"{_fixed(value, 1, strip=False)} {_BINARY_NAMES[index]}"


def format_bytes_decimal(n: int) -> str:
    """Decimal (SI) units, up to 3 decimals, trailing zeros stripped: ``1_875_000_000 -> '1.875 GB'``.

    For comparison with papers, whose "GB" is 10**9 bytes. Halves beyond the third decimal round up.
    """
    n = _require_int(n, "format_bytes_decimal")
    if n < 0:
        return "-" + format_bytes_decimal(-n)
    index, value = _scaled(n, 1000, len(_DECIMAL_NAMES), 3)
    if index == 0:
        return f"{_int_to_str(n)} B"
    return f"{_fixed(value, 3, strip=True)} {_DECIMAL_NAMES[index]}"


def format_bytes_with_count(n: int) -> str:
    """Binary figure with the exact byte count beside it: ``'80.0 GiB (85,899,345,920 B)'``."""
    return f"{format_bytes(n)} ({format_count(n)} B)"


def format_count(n: int) -> str:
    """Thousands separators: ``17825792000 -> '17,825,792,000'``."""
    n = _require_int(n, "format_count")
    if n < 0:
        return "-" + format_count(-n)
    digits = _int_to_str(n)
    head = len(digits) % 3 or 3
    groups = [digits[:head]] + [digits[i : i + 3] for i in range(head, len(digits), 3)]
    return ",".join(groups)


def format_parameters(n: int) -> str:
    """Short parameter count: ``'7B'``, ``'7.5B'``, ``'8.03B'``, ``'350M'``, ``'124.44M'``.

    Up to 3 decimals, trailing zeros stripped, halves rounded up; K, M, B, T suffixes (counts past
    the trillions stay in T).
    """
    n = _require_int(n, "format_parameters")
    if n < 0:
        return "-" + format_parameters(-n)
    index, value = _scaled(n, 1000, len(_PARAMETER_NAMES), 3)
    if index == 0:
        return _int_to_str(n)
    return f"{_fixed(value, 3, strip=True)}{_PARAMETER_NAMES[index]}"
