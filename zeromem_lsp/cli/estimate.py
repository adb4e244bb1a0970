"""`zeromem estimate`: the calculator over explicit bytes or a parameter count."""

from __future__ import annotations

import json

from zeromem_lsp.cli.errors import UsageError
from zeromem_lsp.estimate import Estimate, Inputs, estimate, inputs_from_parameters
from zeromem_lsp.precision import OPTIMIZERS, PRECISIONS, bytes_per_parameter
from zeromem_lsp.present import human_and_exact, stage_table
from zeromem_lsp.stages import ALL as ALL_STAGES, stage as stage_named
from zeromem_lsp.units import UnitError, format_bytes, format_bytes_decimal, format_count, format_parameters, parse_bytes, parse_parameter_count


def register(commands) -> None:
    parser = commands.add_parser(
        "estimate",
        help="per-GPU model-state bytes for DDP and ZeRO 1-3",
        description="Per-GPU persistent model-state bytes for DDP and ZeRO stages 1-3 (exact integers).",
    )
    explicit = parser.add_argument_group("explicit bytes (all three)")
    explicit.add_argument("--parameter-bytes", metavar="N", help="P: parameter bytes, e.g. 14e9 or 13GiB")
    explicit.add_argument("--gradient-bytes", metavar="N", help="G: gradient bytes")
    explicit.add_argument("--optimizer-bytes", metavar="N", help="O: optimizer-state bytes")
    model = parser.add_argument_group("or a model")
    model.add_argument("--parameters", metavar="COUNT", help="parameter count, e.g. 7B, 350M, 8_030_261_248")
    model.add_argument("--precision", choices=PRECISIONS, default="bf16", help="training precision (default bf16)")
    model.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw", help="optimizer (default adamw)")
    parser.add_argument("--world-size", "-R", metavar="R", required=True, help="number of ranks (GPUs)")
    parser.add_argument("--gpu-memory", metavar="SIZE", help="per-GPU budget, e.g. 80GiB or 24GB")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.set_defaults(run=run)


def _bytes(option: str, text: str) -> int:
    try:
        return parse_bytes(text)
    except UnitError as error:
        raise UsageError(f"{option}: {error}") from None


def _world_size(text: str) -> int:
    try:
        value = int(text.strip().replace("_", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise UsageError(f"--world-size: expected a whole number >= 1, got {text!r}")
    return value


def inputs_from_args(args) -> Inputs:
    world_size = _world_size(args.world_size)
    explicit = [args.parameter_bytes, args.gradient_bytes, args.optimizer_bytes]
    if any(value is not None for value in explicit):
        if args.parameters is not None:
            raise UsageError("give either --parameters or the three --*-bytes options, not both")
        if any(value is None for value in explicit):
            raise UsageError("--parameter-bytes, --gradient-bytes and --optimizer-bytes go together: give all three")
        return Inputs(
            parameter_bytes=_bytes("--parameter-bytes", args.parameter_bytes),
            gradient_bytes=_bytes("--gradient-bytes", args.gradient_bytes),
            optimizer_bytes=_bytes("--optimizer-bytes", args.optimizer_bytes),
            world_size=world_size,
        )
    if args.parameters is None:
        raise UsageError("give --parameters COUNT, or --parameter-bytes, --gradient-bytes and --optimizer-bytes")
    try:
        parameters = parse_parameter_count(args.parameters)
    except UnitError as error:
        raise UsageError(f"--parameters: {error}") from None
    per_parameter = bytes_per_parameter(args.precision, args.optimizer)
    return inputs_from_parameters(parameters, per_parameter, world_size)


def run(args) -> int:
    result = estimate(inputs_from_args(args), _bytes("--gpu-memory", args.gpu_memory) if args.gpu_memory else None)
    if args.format == "json":
        print(json.dumps(result.to_json(), indent=2))
    else:
        print("\n".join(render_text(result)))
    return 0


def render_text(result: Estimate) -> list[str]:
    inputs = result.inputs
    lines = []
    if inputs.parameters is not None and inputs.per_parameter is not None:
        bpp = inputs.per_parameter
        lines.append(
            f"model: {format_parameters(inputs.parameters)} parameters ({format_count(inputs.parameters)}), "
            f"{bpp.precision}, {bpp.optimizer_name}: {bpp.parameter} + {bpp.gradient} + {bpp.optimizer} bytes/parameter"
        )
    lines.append(f"P = {human_and_exact(inputs.parameter_bytes)}")
    lines.append(f"G = {human_and_exact(inputs.gradient_bytes)}")
    lines.append(f"O = {human_and_exact(inputs.optimizer_bytes)}")
    lines.append(f"R = {inputs.world_size} ranks")
    if result.gpu_memory is not None:
        lines.append(f"budget = {human_and_exact(result.gpu_memory)} per GPU")
    lines.append("")
    lines.extend(stage_table(result))
    lines.append("")
    for stage in ALL_STAGES:
        figure = result.figures[stage.key]
        lines.append(f"{stage.label:<7} = {stage.formula} = {format_count(figure)} B = {format_bytes_decimal(figure)}")
    if result.gpu_memory is not None:
        cheapest = result.cheapest_fitting
        lines.append("")
        if cheapest is None:
            lines.append(f"no stage fits {format_bytes(result.gpu_memory)} per GPU without offload or more GPUs")
        else:
            lines.append(f"cheapest stage that fits: {stage_named(cheapest).label} ({format_bytes(result.figures[cheapest])} per GPU)")
    for assumption in inputs.assumptions:
        lines.append(f"assumes: {assumption}")
    return lines
