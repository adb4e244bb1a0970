"""zeromem-lsp: exact ZeRO / DDP memory per GPU and loader-faithful validation of training configs."""

from zeromem_lsp.memory.model_state import model_state_bytes

__version__ = "0.1.0"
__all__ = ["__version__", "model_state_bytes"]
