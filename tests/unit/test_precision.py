"""zeromem_lsp.memory.precision: bytes per parameter, name normalisation, and the docs table kept in sync;
configs/precision_names: the optimizer names configs give."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from zeromem_lsp.memory.precision import (
    OPTIMIZERS,
    PRECISIONS,
    BytesPerParameter,
    bytes_per_parameter,
    normalize_precision,
)
from zeromem_lsp.configs.precision_names import optimizer_from_deepspeed_type

DOC = Path(__file__).resolve().parents[2] / "docs" / "memory-model.md"
TABLE_MARKER = "<!-- bytes-per-parameter-table"

# (precision, optimizer) -> (P, G, O): the specification, written out independently of the code.
EXPECTED = {
    ("fp16", "adam"): (2, 2, 12),
    ("fp16", "adamw"): (2, 2, 12),
    ("fp16", "lamb"): (2, 2, 12),
    ("fp16", "sgd_momentum"): (2, 2, 8),
    ("fp16", "sgd"): (2, 2, 4),
    ("fp16", "adagrad"): (2, 2, 8),
    ("fp16", "lion"): (2, 2, 8),
    ("fp16", "adam8bit"): (2, 2, 6),
    ("fp16", "adafactor"): (2, 2, 4),
    ("fp16", "adam8bit_torchao"): (2, 2, 6),
    ("fp32", "adam"): (4, 4, 8),
    ("fp32", "adamw"): (4, 4, 8),
    ("fp32", "lamb"): (4, 4, 8),
    ("fp32", "sgd_momentum"): (4, 4, 4),
    ("fp32", "sgd"): (4, 4, 0),
    ("fp32", "adagrad"): (4, 4, 4),
    ("fp32", "lion"): (4, 4, 4),
    ("fp32", "adam8bit"): (4, 4, 2),
    ("fp32", "adafactor"): (4, 4, 0),
    ("fp32", "adam8bit_torchao"): (4, 4, 2),
}
EXPECTED.update({("bf16", o): v for (p, o), v in list(EXPECTED.items()) if p == "fp16"})


@pytest.mark.parametrize(("precision", "optimizer"), sorted(EXPECTED))
def test_bytes_per_parameter_values(precision, optimizer):
    bpp = bytes_per_parameter(precision, optimizer)
    assert (bpp.parameter, bpp.gradient, bpp.optimizer) == EXPECTED[(precision, optimizer)]
    assert bpp.precision == precision
    assert bpp.optimizer_name == optimizer
    assert bpp.total == bpp.parameter + bpp.gradient + bpp.optimizer
    assert bpp.explanation


def test_every_combination_is_covered():
    assert set(EXPECTED) == {(p, o) for p in PRECISIONS for o in OPTIMIZERS}


def test_zero_paper_k_is_12():
    bpp = bytes_per_parameter("fp16", "adam")
    assert bpp.optimizer == 12
    assert bpp.total == 16
    assert bpp.explanation == "fp16 params 2 B + fp16 grads 2 B + fp32 master 4 B + Adam m,v 8 B"


def test_explanations_name_the_parts():
    assert bytes_per_parameter("bf16", "adamw").explanation == (
        "bf16 params 2 B + bf16 grads 2 B + fp32 master 4 B + AdamW m,v 8 B"
    )
    fp32 = bytes_per_parameter("fp32", "adam").explanation
    assert "fp32 master" not in fp32 and fp32.endswith("(no master copy)")
    assert "beta1" in bytes_per_parameter("bf16", "adafactor").explanation


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_gradient_dtype_overrides_only_g(precision, optimizer):
    base = bytes_per_parameter(precision, optimizer)
    for dtype, size in (("fp32", 4), ("fp16", 2), ("bf16", 2)):
        bpp = bytes_per_parameter(precision, optimizer, gradient_dtype=dtype)
        assert bpp.gradient == size
        assert (bpp.parameter, bpp.optimizer) == (base.parameter, base.optimizer)


def test_grad_accum_fp32_gives_18_bytes_for_mixed_adam():
    bpp = bytes_per_parameter("bf16", "adam", gradient_dtype="fp32")
    assert (bpp.parameter, bpp.gradient, bpp.optimizer, bpp.total) == (2, 4, 12, 18)
    assert "fp32 grads 4 B" in bpp.explanation and "grad_accum_dtype" in bpp.explanation


def test_aliases_are_accepted_and_canonicalised():
    bpp = bytes_per_parameter("BFloat16", " AdamW ")
    assert (bpp.precision, bpp.optimizer_name) == ("bf16", "adamw")
    assert bytes_per_parameter("no", "adam").precision == "fp32"
    assert bytes_per_parameter("bf16", "adam", gradient_dtype="float32").gradient == 4


@pytest.mark.parametrize(
    ("args", "kwargs", "bad"),
    [
        (("fp8", "adam"), {}, "'fp8'"),
        (("int8", "adam"), {}, "'int8'"),
        (("", "adam"), {}, "''"),
        ((None, "adam"), {}, "None"),
        (("bf16", "adamx"), {}, "'adamx'"),
        (("bf16", "sgd momentum"), {}, "'sgd momentum'"),
        (("bf16", None), {}, "None"),
        (("bf16", "adam"), {"gradient_dtype": "fp64"}, "'fp64'"),
        (("bf16", "adam"), {"gradient_dtype": "no"}, "'no'"),
    ],
)
def test_bad_values_raise_naming_them_and_listing_valid_ones(args, kwargs, bad):
    with pytest.raises(ValueError) as info:
        bytes_per_parameter(*args, **kwargs)
    message = str(info.value)
    assert bad in message
    listed = OPTIMIZERS if "optimizer" in message else PRECISIONS
    assert all(name in message for name in listed)


def test_bytes_per_parameter_is_frozen():
    bpp = bytes_per_parameter("bf16", "adam")
    assert isinstance(bpp, BytesPerParameter)
    with pytest.raises(AttributeError):  # immutable
        bpp.parameter = 4  # type: ignore[misc]


# --------------------------------------------------------------------------------------------------
# normalize_precision


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("bf16", "bf16"),
        ("BF16", "bf16"),
        ("bfloat16", "bf16"),
        ("torch.bfloat16", "bf16"),
        ("fp16", "fp16"),
        ("FP16", "fp16"),
        ("float16", "fp16"),
        ("half", "fp16"),
        ("torch.float16", "fp16"),
        ("fp32", "fp32"),
        ("float32", "fp32"),
        ("torch.float32", "fp32"),
        ("no", "fp32"),
        ("NO", "fp32"),
        (" bf16 ", "bf16"),
        ("fp8", None),
        ("auto", None),
        ("int8", None),
        ("", None),
        ("bf 16", None),
        (None, None),
        (16, None),
        (True, None),
    ],
)
def test_normalize_precision(name, expected):
    assert normalize_precision(name) == expected


# --------------------------------------------------------------------------------------------------
# optimizer_from_deepspeed_type


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # DeepSpeed optimizer.type
        ("Adam", "adam"),
        ("adam", "adam"),
        ("ADAM", "adam"),
        ("AdamW", "adamw"),
        ("Lamb", "lamb"),
        ("Lion", "lion"),
        ("Adagrad", "adagrad"),
        ("OneBitAdam", "adam"),
        ("ZeroOneAdam", "adam"),
        ("OneBitLamb", "lamb"),
        ("MuAdam", "adam"),
        ("MuAdamW", "adamw"),
        ("MuSGD", "sgd"),
        ("Muon", None),
        # torch class names
        ("SGD", "sgd"),
        ("Adafactor", "adafactor"),
        # HF TrainingArguments.optim
        ("adamw_torch", "adamw"),
        ("adamw_torch_fused", "adamw"),
        ("adamw_hf", "adamw"),
        ("adamw_apex_fused", "adamw"),
        ("paged_adamw_32bit", "adamw"),
        ("adamw_8bit", "adam8bit"),
        ("adamw_bnb_8bit", "adam8bit"),
        ("paged_adamw_8bit", "adam8bit"),
        ("adamw_torch_8bit", "adam8bit_torchao"),  # torchao's AdamW8bit, not bitsandbytes'
        ("adafactor", "adafactor"),
        ("lion_32bit", "lion"),
        ("paged_lion_32bit", "lion"),
        ("sgd", "sgd"),
        ("adagrad", "adagrad"),
        # not representable / unknown
        ("lion_8bit", None),
        ("adamw_torch_4bit", None),
        ("adamw_anyprecision", None),
        ("rmsprop", None),
        ("", None),
        ("adamx", None),
        (None, None),
        (3, None),
    ],
)
def test_optimizer_names(name, expected):
    assert optimizer_from_deepspeed_type(name) == expected
    if expected is not None:
        assert expected in OPTIMIZERS


@pytest.mark.parametrize(
    ("name", "params", "expected"),
    [
        ("SGD", {"momentum": 0.9}, "sgd_momentum"),
        ("SGD", {"momentum": "0.9"}, "sgd_momentum"),
        ("SGD", {"momentum": 0}, "sgd"),
        ("SGD", {"momentum": 0.0}, "sgd"),
        ("SGD", {"lr": 0.1}, "sgd"),
        ("SGD", None, "sgd"),
        ("MuSGD", {"momentum": 0.5}, "sgd_momentum"),
        ("sgd", {"momentum": 0.9}, "sgd_momentum"),
        ("SGD", {"momentum": "fast"}, None),
        ("SGD", {"momentum": True}, None),
        ("SGD", {"momentum": [0.9]}, None),
        ("Adam", {"amsgrad": True}, None),
        ("AdamW", {"amsgrad": False}, "adamw"),
        ("Adam", {"lr": 1e-4, "betas": [0.9, 0.95]}, "adam"),
    ],
)
def test_optimizer_params(name, params, expected):
    assert optimizer_from_deepspeed_type(name, params) == expected


# --------------------------------------------------------------------------------------------------
# The table in docs/memory-model.md must equal the code, row by row, and cover every combination.


def _cell_names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def parse_doc_table(path: Path = DOC) -> list[dict[str, object]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(TABLE_MARKER))
    header = [c.strip() for c in lines[start + 1].strip().strip("|").split("|")]
    assert header[:7] == ["optimizer", "precision", "P", "G", "O", "total", "total with fp32 grads"], header
    assert set(lines[start + 2].replace("|", "").strip()) <= {"-", ":", " "}
    rows = []
    for line in lines[start + 3 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == len(header), line
        (optimizer,) = _cell_names(cells[0])
        rows.append(
            {
                "optimizer": optimizer,
                "precisions": _cell_names(cells[1]),
                "numbers": tuple(int(c) for c in cells[2:7]),
                "source": cells[7],
                "line": line,
            }
        )
    return rows


def check_doc_table(path: Path) -> None:
    rows = parse_doc_table(path)
    assert rows, "no rows parsed from the bytes-per-parameter table"
    seen = []
    for row in rows:
        assert row["precisions"], row["line"]
        assert row["source"], f"row without a source: {row['line']}"
        for precision in row["precisions"]:
            bpp = bytes_per_parameter(precision, row["optimizer"])
            fp32_grads = bytes_per_parameter(precision, row["optimizer"], gradient_dtype="fp32")
            assert bpp.precision == precision and bpp.optimizer_name == row["optimizer"], row["line"]
            assert row["numbers"] == (
                bpp.parameter,
                bpp.gradient,
                bpp.optimizer,
                bpp.total,
                fp32_grads.total,
            ), row["line"]
            seen.append((precision, row["optimizer"]))
    assert sorted(seen) == sorted({(p, o) for p in PRECISIONS for o in OPTIMIZERS}), "table must list each pair once"


def test_doc_table_matches_code():
    check_doc_table(DOC)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("| `adam` | `fp16` / `bf16` | 2 | 2 | 12 | 16 | 18 |", "| `adam` | `fp16` / `bf16` | 2 | 2 | 12 | 16 | 16 |"),
        ("| `sgd` | `fp32` | 4 | 4 | 0 | 8 | 8 |", "| `sgd` | `fp32` | 4 | 4 | 4 | 8 | 8 |"),
        ("| `lion` | `fp16` / `bf16` |", "| `lion` | `fp16` |"),  # bf16 lion row missing
    ],
)
def test_doc_table_check_detects_drift(tmp_path, old, new):
    """The checker itself must fail when the table drifts from the code."""
    text = DOC.read_text(encoding="utf-8")
    assert old in text
    broken = tmp_path / "memory-model.md"
    broken.write_text(text.replace(old, new), encoding="utf-8")
    with pytest.raises(AssertionError):
        check_doc_table(broken)


def test_doc_figure_one_numbers():
    """The ZeRO paper Figure 1 check quoted in the docs follows from the code."""
    from zeromem_lsp.units import format_bytes_decimal

    psi, ranks = 7_500_000_000, 64
    bpp = bytes_per_parameter("fp16", "adam")
    p, g, o = psi * bpp.parameter, psi * bpp.gradient, psi * bpp.optimizer

    def ceil_div(a: int, b: int) -> int:
        return -(-a // b)

    figures = [p + g + o, p + g + ceil_div(o, ranks), p + ceil_div(g + o, ranks), ceil_div(p + g + o, ranks)]
    assert figures == [120_000_000_000, 31_406_250_000, 16_640_625_000, 1_875_000_000]
    text = DOC.read_text(encoding="utf-8")
    for figure in figures:
        assert format_bytes_decimal(figure) in text
        assert f"{figure:,}" in text
