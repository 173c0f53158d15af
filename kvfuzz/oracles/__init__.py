"""Helpers of the two oracles every op has (`kvfuzz/ops/<op>/oracle.py`): `numpy_ref` (exact,
torch-free) and `torch_ref` (unfused torch)."""
