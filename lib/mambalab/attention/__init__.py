"""Attention metadata: the common metadata and the decode/prefill split, the Mamba backend's metadata (vllm/v1/attention/backends/utils.py, mamba_attn.py)."""
