"""The memory model: the pooled formula, bytes per parameter, stages, the plan, activations, buffers and the peak."""
