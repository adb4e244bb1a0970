"""The GPU side of the peak: PyTorch's CUDA caching allocator (allocator.py), the fixed costs a process pays before
its first tensor (fixed_costs.py: CUDA context, NCCL buffers, cuBLAS workspaces) and the reserved peak of a training
step (reserved.py). Pure Python, no torch: every rule is read from the allocator's C++ source and cited there."""
