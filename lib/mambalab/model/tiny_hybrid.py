"""A tiny hybrid language model: one Mamba2 mixer and one gated-delta-net mixer.

Small enough to run every decode step through the three Triton kernels under
the CPU interpreter, yet shaped like the real thing so the state-management
bugs show up exactly as they do in vLLM:

* :class:`Mamba2Mixer` mirrors ``vllm/model_executor/layers/mamba/mamba_mixer2.py``
  (``in_proj`` -> ``[z, xBC, dt]``, a causal conv over the ``xBC`` channels
  with SiLU, ``selective_state_update`` with ``dt_softplus``, ``dt_bias``,
  ``D`` and ``z`` gating, ``out_proj``);
* :class:`GatedDeltaNetMixer` mirrors the gated-delta-net layer of
  ``vllm/model_executor/models/qwen3_next.py`` (``in_proj`` -> ``q, k, v, a, b``,
  a causal conv over ``qkv`` with SiLU, ``g = -exp(A_log) softplus(a + dt_bias)``,
  ``beta = sigmoid(b)`` computed in the kernel (vLLM 0.33's packed decode, or
  ``fused_sigmoid_gating_delta_rule_update`` with speculation) with the
  in-kernel L2 norm, ``out_proj``);
* :class:`TinyHybridModel` stacks them pre-norm with residuals (RMSNorm, as in
  ``Qwen3NextDecoderLayer``) between an embedding and an ``lm_head``.

This file holds :class:`TinyHybridModel`, the model that stacks the two mixers
(``Qwen3NextForCausalLM`` and its decoder layers in ``qwen3_next.py``, in
miniature); its pieces live beside it, one per file: ``config.py``
(:class:`TinyHybridConfig`), ``state.py`` (:class:`ModelState`),
``mamba_mixer2.py``, ``gated_delta_net.py``, ``decode_slots.py`` (the slots
one decode step reads and writes) and ``layers.py`` (RMSNorm, weight draws).
All of them are importable from here.

Every request's recurrent memory lives in :class:`ModelState`: four pools
(Mamba conv, Mamba SSM, GDN conv, GDN recurrent) indexed by *block id*, the
way vLLM's Mamba KV-cache group stores states in blocks. Block 0 is the null
block: it starts as zeros and a correct engine never reads or writes it.

Three ways to run the model, and why there are three:

* :meth:`TinyHybridModel.forward_ref`: one request alone, token by token, pure
  torch (the kernels' ``*_ref`` functions). The yardstick.
* :meth:`TinyHybridModel.prefill`: a chunk of one request's prompt, eager, with
  the references run over the whole chunk at once (the "parallel" form), from
  and to pool slots.
* :meth:`TinyHybridModel.forward_decode`: the batched decode through the
  Triton kernels, the body vLLM captures in a FULL CUDA graph: no host
  synchronisation, no value-dependent Python control flow, allocations by
  shape only. This is where padded rows, null blocks and speculative columns
  meet the kernels' guards.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict

import torch
import torch.nn.functional as F

from mambalab.device import DEVICE
from mambalab.lab.bugs import BugConfig
from mambalab.model.config import TinyHybridConfig
from mambalab.model.decode_slots import _DecodeArgs
from mambalab.model.gated_delta_net import GatedDeltaNetMixer
from mambalab.model.layers import _randn, rms_norm
from mambalab.model.mamba_mixer2 import Mamba2Mixer
from mambalab.model.state import STATE_KEYS, ModelState, zero_state


class TinyHybridModel:
    """Embedding -> [RMSNorm -> Mamba2 mixer] + residual -> [RMSNorm -> GDN mixer] + residual
    -> RMSNorm -> lm_head.

    Weights are drawn from ``torch.Generator().manual_seed(cfg.seed)`` on the
    CPU and then moved, so one seed gives the same model on every device.
    The scales keep greedy decoding robust: logits spread over several units,
    mixers strong enough against the residual that a prompt does not
    collapse into one repeated token.
    """

    def __init__(self, cfg: TinyHybridConfig | None = None, device: torch.device | str | None = None) -> None:
        self.cfg = cfg = cfg if cfg is not None else TinyHybridConfig()
        self.device = DEVICE if device is None else torch.device(device)
        gen = torch.Generator().manual_seed(cfg.seed)
        d = cfg.d_model
        self.embed = _randn(gen, cfg.vocab_size, d).to(self.device)
        self.mamba = Mamba2Mixer(cfg, gen, self.device)
        self.gdn = GatedDeltaNetMixer(cfg, gen, self.device)
        self.norm_mamba = (1.0 + _randn(gen, d, std=0.1)).to(self.device)
        self.norm_gdn = (1.0 + _randn(gen, d, std=0.1)).to(self.device)
        self.norm_final = (1.0 + _randn(gen, d, std=0.1)).to(self.device)
        if cfg.tie_word_embeddings:
            self.lm_head = self.embed
        else:
            self.lm_head = _randn(gen, cfg.vocab_size, d, std=1.0).to(self.device)

    # -- pieces ---------------------------------------------------------------
    def _embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(token_ids.to(torch.int64), self.embed)

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        return rms_norm(h, self.norm_final) @ self.lm_head.t()

    def _ids(self, token_ids) -> torch.Tensor:
        if isinstance(token_ids, torch.Tensor):
            return token_ids.to(self.device, torch.int64).reshape(-1)
        return torch.tensor(list(token_ids), dtype=torch.int64, device=self.device)

    def _chunk_ref(self, ids: torch.Tensor, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """Run a chunk of one request with the references, layer by layer over the whole chunk."""
        pool = ModelState.allocate(self.cfg, 2, torch.float32, self.device)  # 0: null, 1: this request
        pool.write_slot(1, state)
        h = self._embed(ids)
        h = h + self.mamba.forward_ref(rms_norm(h, self.norm_mamba), pool, 1)
        h = h + self.gdn.forward_ref(rms_norm(h, self.norm_gdn), pool, 1)
        return self._logits(h), pool.read_slot(1)

    # -- the three ways to run --------------------------------------------------
    def forward_ref(
        self, token_ids, state: dict[str, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One request alone, one token at a time, pure torch: ``(logits [T, vocab], final state)``.

        ``state`` is a dict with the keys of :data:`STATE_KEYS` (as returned by
        this method or :meth:`ModelState.read_slot`); None means zeros.
        The per-request yardstick every engine run is compared with.
        """
        ids = self._ids(token_ids)
        st = zero_state(self.cfg, self.device) if state is None else {
            k: v.to(self.device, torch.float32) for k, v in state.items()
        }
        rows = []
        for t in range(ids.shape[0]):
            logits, st = self._chunk_ref(ids[t : t + 1], st)
            rows.append(logits)
        logits = torch.cat(rows) if rows else torch.empty(0, self.cfg.vocab_size, device=self.device)
        return logits, st

    def prefill(
        self,
        token_ids,
        state_slot_src: int,
        state_slot_dst: int,
        pools: ModelState,
        has_initial_state: bool,
    ) -> torch.Tensor:
        """A chunk of one request's prompt (eager, references): logits of its last token ``[vocab]``.

        Reads the initial state from pool slot ``state_slot_src`` when
        ``has_initial_state`` (a later chunk of a chunked prefill, or a prefix
        cache hit), else starts from zeros (``has_initial_states_p`` of
        ``mamba_attn.py``), and writes the final state to ``state_slot_dst``.
        The whole chunk goes through each layer at once: "the parallel form".
        """
        ids = self._ids(token_ids)
        if ids.numel() == 0:
            raise ValueError("prefill needs at least one token")
        if has_initial_state:
            st = {k: v.float() for k, v in pools.read_slot(state_slot_src).items()}
        else:
            st = zero_state(self.cfg, self.device)
        logits, st = self._chunk_ref(ids, st)
        pools.write_slot(state_slot_dst, st)
        return logits[-1]

    def forward_decode(
        self,
        input_ids: torch.Tensor,
        pools: ModelState,
        src_indices: torch.Tensor,
        dst_indices: torch.Tensor | None = None,
        num_accepted_tokens: torch.Tensor | None = None,
        query_start_loc: torch.Tensor | None = None,
        bugs: BugConfig | None = None,
    ) -> torch.Tensor:
        """The batched decode through the Triton kernels: ``logits [num_tokens, vocab]``.

        * Plain decode: ``src_indices``/``dst_indices`` 1-D ``(N,)``, one token per
          row (``num_tokens == N``).
        * Speculative decode: 2-D ``(N, C)`` indices with ``query_start_loc
          (N + 1,)`` (rows of up to ``1 + num_spec`` tokens) and
          ``num_accepted_tokens (N,)``: each row starts from its column
          ``num_accepted - 1`` and the state after its token ``t`` goes to
          column ``t``; the conv keeps its history in column 0's block.

        ``dst_indices`` None or the very same tensor: read and write in place
        ("none" mode). A different tensor ("all" mode): the SSU kernel reads
        ``src`` and writes ``dst``; conv and GDN states are first moved from
        ``src`` to ``dst`` by a guarded tensor copy (those kernels take one
        index array). Null rows (index 0) get zero mixer output; their logits
        mean nothing. ``bugs`` goes to every kernel (default: the active
        configuration).

        CUDA-graph safe: shapes decide everything, no value is read on the
        host, allocations depend on shapes only.
        """
        cfg = self.cfg
        if dst_indices is None:
            dst_indices = src_indices
        if src_indices.dim() not in (1, 2) or dst_indices.dim() != src_indices.dim():
            raise ValueError(
                f"src_indices/dst_indices must both be 1-D (N,) or 2-D (N, C), got "
                f"{tuple(src_indices.shape)} and {tuple(dst_indices.shape)}"
            )
        if src_indices.shape[0] != dst_indices.shape[0]:
            raise ValueError("src_indices and dst_indices must have one row per request each")
        num_tokens = input_ids.shape[0]
        if src_indices.dim() == 1:
            if num_accepted_tokens is not None or query_start_loc is not None:
                raise ValueError("num_accepted_tokens/query_start_loc need 2-D (N, C) indices")
            if num_tokens != src_indices.shape[0]:
                raise ValueError(
                    f"plain decode is one token per row: {num_tokens} tokens for {src_indices.shape[0]} rows"
                )
        else:
            if query_start_loc is None or query_start_loc.shape != (src_indices.shape[0] + 1,):
                raise ValueError("2-D indices need query_start_loc of shape (N + 1,)")
        d = _DecodeArgs(
            src=src_indices, dst=dst_indices, num_accepted_tokens=num_accepted_tokens,
            query_start_loc=query_start_loc if src_indices.dim() == 2 else None,
            max_query_len=cfg.decode_query_len, bugs=bugs,
        )
        h = self._embed(input_ids)
        h = h + self.mamba.forward_decode(rms_norm(h, self.norm_mamba), pools, d)
        h = h + self.gdn.forward_decode(rms_norm(h, self.norm_gdn), pools, d)
        return self._logits(h)

    # -- conveniences for the workbook -------------------------------------------
    def greedy_ref(self, prompt, max_new_tokens: int) -> list[int]:
        """Greedy continuation of ``prompt`` with :meth:`forward_ref` (the expected tokens). Under
        ``torch.inference_mode``: the same operations without autograd's bookkeeping (a fifth faster; only
        token ids leave).

        :meth:`forward_ref` runs one token at a time, so its state after a prefix, continued with the
        rest, is the state of the whole sequence, bit for bit. The state (and last logits) after every
        sequence this method has run is kept (:meth:`_ref_prefix`), and a later call starts from the
        longest kept prefix of its prompt: the oracle drafter asks for the continuation of every request
        at every step, one or two tokens longer each time."""
        tokens = [int(t) for t in prompt]
        with torch.inference_mode():
            done, st, last = self._ref_prefix(tokens)
            if done < len(tokens) or last is None:
                logits, st = self.forward_ref(tokens[done:], st)
                last = logits[-1]
                self._ref_keep(tokens, st, last)
            out = []
            nxt = int(last.argmax())
            for _ in range(max_new_tokens):
                out.append(nxt)
                logits, st = self.forward_ref([nxt], st)
                self._ref_keep(tokens + out, st, logits[-1])
                nxt = int(logits[-1].argmax())
        return out

    _REF_KEEP = 8192  # sequences whose reference state is kept (a state is under a kilobyte here)

    def _ref_weights(self) -> tuple:
        """The weights the reference runs with: each weight tensor (kept alive here) and its in-place version."""
        return tuple((t, t._version) for o in (self, self.mamba, self.gdn) for t in vars(o).values()
                     if isinstance(t, torch.Tensor))

    def _ref_prefix(self, tokens: list[int]) -> tuple[int, dict | None, torch.Tensor | None]:
        """``(n, state, last logits)`` after the longest kept prefix ``tokens[:n]`` (``(0, None, None)``
        when none is kept); everything kept is forgotten when a weight changed or was replaced."""
        weights = self._ref_weights()
        kept = _REF_STATES.get(self)
        if kept is None or len(kept[0]) != len(weights) or any(
                a is not b or va != vb for (a, va), (b, vb) in zip(kept[0], weights)):
            kept = _REF_STATES[self] = (weights, OrderedDict())
        states = kept[1]
        for n in range(len(tokens), 0, -1):
            got = states.get(tuple(tokens[:n]))
            if got is not None:
                states.move_to_end(tuple(tokens[:n]))
                return n, got[0], got[1]
        return 0, None, None

    def _ref_keep(self, tokens: list[int], state: dict, last: torch.Tensor) -> None:
        states = _REF_STATES[self][1]
        states[tuple(tokens)] = (state, last)
        while len(states) > self._REF_KEEP:
            states.popitem(last=False)


# The states greedy_ref keeps, per model, outside the model: what a model reaches (its content key for the
# reference and capture memos, ``worker/cuda_graph._reach``) must not change when greedy_ref runs.
_REF_STATES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


__all__ = [
    "STATE_KEYS",
    "TinyHybridConfig",
    "ModelState",
    "TinyHybridModel",
    "Mamba2Mixer",
    "GatedDeltaNetMixer",
    "zero_state",
    "rms_norm",
]
