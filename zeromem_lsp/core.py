"""Kept so `from zeromem_lsp.core import model_state_bytes` (the seed's public API) still works.

The formula lives in `zeromem_lsp.memory.model_state`.
"""

from zeromem_lsp.memory.model_state import STAGES, ceil_div, exact_int, model_state_bytes

__all__ = ["STAGES", "ceil_div", "exact_int", "model_state_bytes"]
