"""Two independent oracles per op: `numpy_ref` (exact, torch-free) and `torch_ref` (unfused torch)."""
