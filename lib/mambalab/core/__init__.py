"""Scheduler-side state: block pool, KV-cache specs and managers, requests, the scheduler (vllm/v1/core/, vllm/v1/request.py, vllm/v1/kv_cache_interface.py)."""
