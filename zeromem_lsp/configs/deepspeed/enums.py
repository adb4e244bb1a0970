"""Enums of the DeepSpeed section models, kept free of pydantic so the generated facts
(facts.py) can name their defaults without importing the models."""

from __future__ import annotations

from enum import Enum


class ZeroStage(int, Enum):
    """ZeRO partitioning stage."""

    disabled = 0
    optimizer_states = 1
    gradients = 2
    weights = 3


class OffloadDevice(str, Enum):
    """Where offloaded tensors live."""

    none = "none"
    cpu = "cpu"
    nvme = "nvme"


class QuantType(str, Enum):
    """Weight quantization scheme."""

    symmetric = "symmetric"
    asymmetric = "asymmetric"
