"""Loader-faithful models and validation of training configs (DeepSpeed, FSDP, Accelerate).

DeepSpeed: see :mod:`zeromem_lsp.configs.deepspeed.validation` (``validate_deepspeed``, ``field_doc``,
``section_keys``) and the models in :mod:`zeromem_lsp.configs.deepspeed.models`.
"""
