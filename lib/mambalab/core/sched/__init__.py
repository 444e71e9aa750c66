"""The scheduler and its output (vllm/v1/core/sched/)."""
