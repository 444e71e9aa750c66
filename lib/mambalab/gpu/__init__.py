"""GPU measurements: the cold-cache benchmark and notebook 06's report (no vLLM counterpart)."""
