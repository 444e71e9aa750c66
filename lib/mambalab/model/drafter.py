"""A deterministic draft proposer whose acceptance the workbook controls.

Plays the role of vLLM's proposers (``vllm/v1/spec_decode/``: n-gram, EAGLE,
MTP) for speculative decoding. It knows the target model's own greedy
continuation and proposes it, then spoils the drafts after a chosen number
so that exactly that many are accepted: acceptance becomes a knob (a rate,
seeded per request and step, or a fixed schedule) instead of an accident.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

from mambalab.model.tiny_hybrid import TinyHybridModel


class OracleDrafter:
    def __init__(
        self,
        model: TinyHybridModel,
        num_speculative_tokens: int,
        acceptance: float | Sequence[int] = 0.5,
        seed: int = 0,
    ) -> None:
        if num_speculative_tokens < 1:
            raise ValueError(f"num_speculative_tokens must be >= 1, got {num_speculative_tokens}")
        if isinstance(acceptance, (int, float)):
            if not 0.0 <= float(acceptance) <= 1.0:
                raise ValueError(f"acceptance rate must be in [0, 1], got {acceptance}")
        elif not all(0 <= int(a) <= num_speculative_tokens for a in acceptance) or not len(acceptance):
            raise ValueError(f"acceptance schedule must hold counts in [0, {num_speculative_tokens}]")
        self.model = model
        self.k = num_speculative_tokens
        self.acceptance = acceptance
        self.seed = seed
        self.vocab = model.cfg.vocab_size

    def _rng(self, req_id: str, num_tokens: int) -> np.random.Generator:
        digest = hashlib.sha256(f"{self.seed}/{req_id}/{num_tokens}".encode()).digest()
        return np.random.default_rng(int.from_bytes(digest[:8], "little"))

    def num_to_accept(self, req_id: str, num_tokens: int, step_index: int) -> int:
        """How many of this step's drafts will be right."""
        if not isinstance(self.acceptance, (int, float)):
            return int(self.acceptance[step_index % len(self.acceptance)])
        rng = self._rng(req_id, num_tokens)
        n = 0
        while n < self.k and rng.random() < float(self.acceptance):
            n += 1
        return n

    def propose(self, req_id: str, token_ids: Sequence[int], step_index: int, max_drafts: int) -> list[int]:
        """Drafts to verify after ``token_ids`` (the request's tokens so far)."""
        k = min(self.k, max_drafts)
        if k <= 0:
            return []
        truth = self.model.greedy_ref(list(token_ids), k)
        good = min(self.num_to_accept(req_id, len(token_ids), step_index), k)
        rng = self._rng(req_id, len(token_ids) + 7919)
        drafts = list(truth[:good])
        for t in truth[good:k]:
            drafts.append(int((t + 1 + rng.integers(0, self.vocab - 1)) % self.vocab))
        return drafts


__all__ = ["OracleDrafter"]
