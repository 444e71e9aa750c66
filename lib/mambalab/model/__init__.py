"""The tiny hybrid model and the speculative drafter (vllm/model_executor/models/, vllm/v1/spec_decode/ in miniature)."""
