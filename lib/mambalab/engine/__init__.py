"""The engine's step loop and data-parallel ranks (vllm/v1/engine/core.py)."""
