"""zeromem_lsp.units: exact parsing and formatting of byte sizes and parameter counts."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zeromem_lsp.units import (
    UnitError,
    format_bytes,
    format_bytes_decimal,
    format_bytes_with_count,
    format_count,
    format_parameters,
    parse_bytes,
    parse_parameter_count,
)

# --------------------------------------------------------------------------------------------------
# parse_bytes


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("80GB", 80 * 10**9),
        ("80GiB", 80 * 2**30),
        ("80 GiB", 85_899_345_920),
        ("  80 GiB  ", 85_899_345_920),
        ("1.5TiB", 3 * 2**39),
        ("85899345920", 85_899_345_920),
        ("80e9", 80 * 10**9),
        ("8E10", 80 * 10**9),
        ("1e3kB", 10**6),
        ("512MiB", 512 * 2**20),
        ("1.5 kB", 1500),
        ("0", 0),
        ("0B", 0),
        ("-0 B", 0),
        ("+5 B", 5),
        ("1 byte", 1),
        ("12 bytes", 12),
        ("7b", 7),
        # decimal letters without B are decimal; the 'i' makes them binary
        ("80G", 80 * 10**9),
        ("80g", 80 * 10**9),
        ("80gb", 80 * 10**9),
        ("80Gi", 80 * 2**30),
        ("80gib", 80 * 2**30),
        ("80GIB", 80 * 2**30),
        ("1KB", 1000),
        ("1kb", 1000),
        ("1K", 1000),
        ("1Ki", 1024),
        ("1M", 10**6),
        ("1T", 10**12),
        ("1TB", 10**12),
        ("1TiB", 2**40),
        ("1PB", 10**15),
        ("1PiB", 2**50),
        ("1EB", 10**18),
        ("1EiB", 2**60),
        ("2.5EiB", 5 * 2**59),
        ("80e", 80 * 10**18),  # a bare E is exabytes (decimal), like a bare G is gigabytes
        (".5 KiB", 512),
        ("0.25KiB", 256),
        ("1.875 GB", 1_875_000_000),
        ("31.40625e9", 31_406_250_000),
        ("85_899_345_920", 85_899_345_920),
        ("85,899,345,920 B", 85_899_345_920),
        ("1,000 GB", 10**12),
        ("1e30", 10**30),
        ("1000000000000000000000000000000", 10**30),
        ("1e-3 kB", 1),
        ("123456789012345678901234567890.5 KiB", 123456789012345678901234567890 * 1024 + 512),
    ],
)
def test_parse_bytes_exact(text, expected):
    assert parse_bytes(text) == expected
    assert type(parse_bytes(text)) is int


def test_parse_bytes_no_float_rounding():
    # A float path would give 0.1*3 != 0.3 style errors; exact parsing keeps every digit.
    assert parse_bytes("0.3 GB") == 300_000_000
    assert parse_bytes("1.1 GB") == 1_100_000_000
    assert parse_bytes("9007199254740993") == 2**53 + 1
    assert parse_bytes("9007199254740993 GiB") == (2**53 + 1) * 2**30
    assert parse_bytes("1.000000000000000000000000000001e30") == 10**30 + 1


@pytest.mark.parametrize("value", [0, 1, 80 * 2**30, 10**30, 10**100])
def test_parse_bytes_int_passes_through(value):
    assert parse_bytes(value) == value


def test_parse_bytes_decimal_object_is_exact():
    assert parse_bytes(Decimal("5E8")) == 500_000_000
    with pytest.raises(UnitError):
        parse_bytes(Decimal("0.5"))
    with pytest.raises(UnitError):
        parse_bytes(Decimal("NaN"))


@pytest.mark.parametrize("value", [True, False])
def test_parse_bytes_rejects_bool(value):
    with pytest.raises(UnitError, match=f"'{value}'"):
        parse_bytes(value)


@pytest.mark.parametrize("value", [-1, -(10**30)])
def test_parse_bytes_rejects_negative_int(value):
    with pytest.raises(UnitError, match="negative"):
        parse_bytes(value)


@pytest.mark.parametrize("value", [5e8, 1.0, float("nan"), None, [1], b"80GB"])
def test_parse_bytes_rejects_other_types(value):
    with pytest.raises(UnitError):
        parse_bytes(value)


def test_parse_bytes_error_message_format():
    with pytest.raises(UnitError) as info:
        parse_bytes("80 GBs")
    assert str(info.value) == (
        "invalid byte size '80 GBs': expected a number with an optional unit "
        "(B, kB, MB, GB, TB, KiB, MiB, GiB, TiB)"
    )
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "GB",
        "GiB",
        "80 GBs",
        "80 GBB",
        "80 gigabytes",
        "eighty GB",
        "80 G B",
        "8 0GB",
        "80 e9",
        "80e9.5",
        "1.5.GB",
        "1..5GB",
        "1.GB",
        ".GB",
        "1,5GB",
        "1,50GB",
        "10,00 GB",
        ",100",
        "1__000",
        "_1000",
        "1000_",
        "1_000,000",
        "0x10",
        "1/2 GB",
        "--5",
        "+-5",
        "5-",
        "inf",
        "nan",
        "Infinity GB",
        "80 Gib/s",
        "80%",
        "80 Kb Kb",
        "١٢٣",  # non-ASCII digits
        "80\u00a0GB\u00a0x",
        "1e999999",
        "1e-999999",
        "1e99999999999999",
        pytest.param("9" * 5000, id="5000-digits"),
        "80 bits",
        "80 ZB",
        "80 iB",
    ],
)
def test_parse_bytes_garbage_raises_quoting_text(text):
    with pytest.raises(UnitError) as info:
        parse_bytes(text)
    assert f"'{text}'" in str(info.value)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("1.5 B", "1.5 bytes is not a whole number"),
        ("1.1 KiB", "1126.4 bytes is not a whole number"),
        ("0.1", "0.1 bytes"),
        ("1e-1", "0.1 bytes"),
        ("1e-4 kB", "0.1 bytes"),
        ("-5GB", "must not be negative"),
        ("-1", "must not be negative"),
        ("-0.5 B", "must not be negative"),
    ],
)
def test_parse_bytes_semantic_errors(text, reason):
    with pytest.raises(UnitError) as info:
        parse_bytes(text)
    assert f"'{text}'" in str(info.value)
    assert reason in str(info.value)


@given(st.integers(min_value=0, max_value=10**40))
def test_parse_bytes_round_trip_plain(n):
    assert parse_bytes(f"{n}B") == n
    assert parse_bytes(f"{n} B") == n
    assert parse_bytes(str(n)) == n
    assert parse_bytes(f"{n:_}") == n
    assert parse_bytes(format_count(n)) == n


@given(st.integers(min_value=0, max_value=10**12), st.sampled_from(["KiB", "MiB", "GiB", "TiB", "kB", "MB", "GB", "TB"]))
def test_parse_bytes_units_multiply(n, unit):
    factor = parse_bytes(f"1{unit}")
    assert parse_bytes(f"{n}{unit}") == n * factor
    assert parse_bytes(f"{n} {unit.lower()}") == n * factor
    assert parse_bytes(f"{n} {unit.upper()}") == n * factor


@given(st.integers(min_value=0, max_value=10**30), st.integers(min_value=0, max_value=30))
def test_parse_bytes_exponent_is_exact(mantissa, exponent):
    assert parse_bytes(f"{mantissa}e{exponent}") == mantissa * 10**exponent


@given(st.text(max_size=20))
def test_parse_bytes_never_raises_anything_but_unit_error(text):
    try:
        result = parse_bytes(text)
    except UnitError as error:
        assert f"'{text}'" in str(error)
    else:
        assert isinstance(result, int) and result >= 0


# --------------------------------------------------------------------------------------------------
# parse_parameter_count


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7B", 7_000_000_000),
        ("7b", 7_000_000_000),
        ("7 B", 7_000_000_000),
        ("7.5e9", 7_500_000_000),
        ("70b", 70_000_000_000),
        ("350M", 350_000_000),
        ("350m", 350_000_000),
        ("8_030_261_248", 8_030_261_248),
        ("8,030,261,248", 8_030_261_248),
        ("1.3k", 1_300),
        ("1.3K", 1_300),
        ("124M", 124_000_000),
        ("1T", 10**12),
        ("1.5t", 1_500_000_000_000),
        ("8.030261248B", 8_030_261_248),
        ("124439808", 124_439_808),
        ("1", 1),
        ("1e30", 10**30),
        ("0.001K", 1),
        (" 175B ", 175_000_000_000),
    ],
)
def test_parse_parameter_count_exact(text, expected):
    assert parse_parameter_count(text) == expected


@pytest.mark.parametrize("value", [1, 7_000_000_000, 10**30])
def test_parse_parameter_count_int_passes_through(value):
    assert parse_parameter_count(value) == value


@pytest.mark.parametrize("value", [True, False, 0, -7, 7.0, None])
def test_parse_parameter_count_rejects_non_positive_and_non_int(value):
    with pytest.raises(UnitError, match=f"'{value}'"):
        parse_parameter_count(value)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "B",
        "7G",
        "7GB",
        "7 billion",
        "7BB",
        "7KB",
        "7 Bn",
        "0",
        "0B",
        "-7B",
        "1.5",
        "0.0001K",
        "1.2345678901B",
        "7,5B",
        "seven",
        "7B params",
        "1e999999",
    ],
)
def test_parse_parameter_count_garbage_raises_quoting_text(text):
    with pytest.raises(UnitError) as info:
        parse_parameter_count(text)
    assert f"'{text}'" in str(info.value)
    assert str(info.value).startswith("invalid parameter count")


@given(st.integers(min_value=1, max_value=10**30))
def test_parse_parameter_count_round_trips(n):
    assert parse_parameter_count(str(n)) == n
    assert parse_parameter_count(format_count(n)) == n
    assert parse_parameter_count(f"{n:_}") == n


# --------------------------------------------------------------------------------------------------
# format_bytes (binary, one decimal)


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, "0 B"),
        (1, "1 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (1075, "1.0 KiB"),  # 1.0498 KiB
        (1076, "1.1 KiB"),  # 1.0508 KiB
        (1126, "1.1 KiB"),
        (80 * 2**30, "80.0 GiB"),
        (85_899_345_920, "80.0 GiB"),
        (80 * 10**9, "74.5 GiB"),
        (2**40, "1.0 TiB"),
        (2**50, "1.0 PiB"),
        (2**60, "1.0 EiB"),
        (2**70, "1.0 ZiB"),
        (2**80, "1.0 YiB"),
        (2**90, "1024.0 YiB"),
        (10**30, "827180.6 YiB"),
        # rounding reaching the next unit moves up rather than printing 1024.0 KiB
        (1_048_575, "1.0 MiB"),
        (1_048_524, "1023.9 KiB"),  # 1023.9492 KiB
        (1_048_525, "1.0 MiB"),  # 1023.9502 KiB
        (1_048_526, "1.0 MiB"),  # 1023.9512 KiB rounds to 1024.0 KiB -> shown as 1.0 MiB
        (-1536, "-1.5 KiB"),
    ],
)
def test_format_bytes(n, expected):
    assert format_bytes(n) == expected


def test_format_bytes_round_half_up_exactly():
    assert format_bytes(5 * 2**18) == "1.3 MiB"  # exactly 1.25 MiB: the half rounds up
    assert format_bytes(5 * 2**18 - 1) == "1.2 MiB"  # one byte below the half
    assert format_bytes(2**40 + 2**38) == "1.3 TiB"  # exactly 1.25 TiB
    assert format_bytes(2**40 + 2**38 - 1) == "1.2 TiB"
    assert format_bytes(2**21 + 2**17) == "2.1 MiB"  # 2.0625 MiB
    # far beyond float precision: an exact half of a tenth is still seen and rounded up
    assert format_bytes(2**80 * 10**20 + 2**78) == "100000000000000000000.3 YiB"  # ...0.25 -> up
    assert format_bytes(2**80 * 10**20 + 2**78 - 1) == "100000000000000000000.2 YiB"


@given(st.integers(min_value=0, max_value=10**40))
def test_format_bytes_is_within_half_a_tenth(n):
    text = format_bytes(n)
    number, unit = text.split(" ")
    factor = parse_bytes(f"1{unit}") if unit not in ("ZiB", "YiB") else {"ZiB": 2**70, "YiB": 2**80}[unit]
    tenths = int(number.replace(".", "")) if "." in number else int(number) * 10
    # |n - tenths/10 * factor| <= factor / 20  <=>  |10n - tenths*factor| * 2 <= factor
    assert abs(10 * n - tenths * factor) * 2 <= factor
    if unit != "B":
        assert number.count(".") == 1 and len(number.split(".")[1]) == 1
        assert tenths >= 10  # never '0.x KiB'
        if unit != "YiB":
            assert tenths < 10240  # never '1024.0 KiB'


@pytest.mark.parametrize(
    "n", [10**30, 10**100, 2**4096, 10**5000, -(10**5000)], ids=["1e30", "1e100", "2^4096", "1e5000", "-1e5000"]
)
def test_formatters_never_raise_on_huge_ints(n):
    assert format_bytes(n).endswith(" YiB")
    assert format_bytes_decimal(n).endswith(" YB")
    assert format_parameters(n).endswith("T")
    digits = format_count(n).replace(",", "").lstrip("-")
    assert digits.isdigit() and len(digits) == len(format_count(abs(n)).replace(",", ""))


def test_format_count_beyond_int_str_limit():
    n = 10**5000 + 123
    text = format_count(n)
    assert text.startswith("100,000,000,")
    assert text.endswith(",123")
    assert len(text.replace(",", "")) == 5001


@pytest.mark.parametrize("formatter", [format_bytes, format_bytes_decimal, format_count, format_parameters])
@pytest.mark.parametrize("value", [True, 1.5, "1", None])
def test_formatters_reject_non_int(formatter, value):
    with pytest.raises(TypeError):
        formatter(value)


# --------------------------------------------------------------------------------------------------
# format_bytes_decimal


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1000, "1 kB"),
        (1500, "1.5 kB"),
        (120_000_000_000, "120 GB"),
        (1_875_000_000, "1.875 GB"),
        (31_400_000_000, "31.4 GB"),
        (31_406_250_000, "31.406 GB"),
        (16_640_625_000, "16.641 GB"),
        (16_640_500_000, "16.641 GB"),  # exact half rounds up
        (16_640_499_999, "16.64 GB"),
        (999_999_500, "1 GB"),  # 999.9995 MB rounds to 1000.000 MB -> next unit
        (999_999_499, "999.999 MB"),
        (80 * 10**9, "80 GB"),
        (80 * 2**30, "85.899 GB"),
        (10**12, "1 TB"),
        (10**24, "1 YB"),
        (10**30, "1000000 YB"),
        (-1_875_000_000, "-1.875 GB"),
    ],
)
def test_format_bytes_decimal(n, expected):
    assert format_bytes_decimal(n) == expected


@given(st.integers(min_value=0, max_value=10**26))
def test_format_bytes_decimal_round_trips_within_rounding(n):
    text = format_bytes_decimal(n)
    parsed = parse_bytes(text) if not text.endswith(("ZB", "YB")) else None
    if parsed is not None:
        unit = parse_bytes("1" + text.split(" ")[1])
        assert abs(parsed - n) * 2000 <= unit
    number = text.split(" ")[0]
    assert not number.endswith("0") or "." not in number
    assert "." not in number or len(number.split(".")[1]) <= 3


def test_format_bytes_with_count():
    assert format_bytes_with_count(80 * 2**30) == "80.0 GiB (85,899,345,920 B)"
    assert format_bytes_with_count(0) == "0 B (0 B)"


# --------------------------------------------------------------------------------------------------
# format_count and format_parameters


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, "0"),
        (7, "7"),
        (999, "999"),
        (1000, "1,000"),
        (17_825_792_000, "17,825,792,000"),
        (10**30, "1" + ",000" * 10),
        (-1234567, "-1,234,567"),
    ],
)
def test_format_count(n, expected):
    assert format_count(n) == expected


@given(st.integers(min_value=-(10**60), max_value=10**60))
def test_format_count_matches_python_grouping(n):
    assert format_count(n) == f"{n:,}"
    assert int(format_count(n).replace(",", "")) == n


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, "0"),
        (999, "999"),
        (1000, "1K"),
        (1300, "1.3K"),
        (7_000_000_000, "7B"),
        (7_500_000_000, "7.5B"),
        (8_030_261_248, "8.03B"),
        (350_000_000, "350M"),
        (124_439_808, "124.44M"),
        (70_553_706_496, "70.554B"),
        (999_999_999, "1B"),
        (999_999_499, "999.999M"),
        (1_234_500, "1.235M"),  # exact half (1.2345) rounds up
        (10**12, "1T"),
        (10**15, "1000T"),
    ],
)
def test_format_parameters(n, expected):
    assert format_parameters(n) == expected


@given(st.integers(min_value=1, max_value=10**15))
def test_format_parameters_parses_back_close(n):
    text = format_parameters(n)
    parsed = parse_parameter_count(text)
    suffix = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}.get(text[-1], 1)
    assert abs(parsed - n) * 2000 <= suffix
