"""zeromem-lsp: exact ZeRO / DDP memory per GPU and loader-faithful validation of training configs."""

__version__ = "0.1.0"
