"""The gated-delta-net mixer: the ``Qwen3NextGatedDeltaNet`` layer of
``vllm/model_executor/models/qwen3_next.py`` in miniature (``in_proj`` -> ``q, k, v, a, b``, a
causal conv over ``qkv`` with SiLU, ``g = -exp(A_log) softplus(a + dt_bias)``,
``beta = sigmoid(b)``, the gated delta rule with the in-kernel L2 norm, ``out_proj``), with a pure-torch
reference path (the gates in torch, then ``fused_recurrent_gated_delta_rule_ref``) and the batched decode through
the Triton kernels as vLLM 0.33's ``qwen_gdn_linear_attn.py`` calls them: the gates computed in the kernel,
``fused_recurrent_gated_delta_rule_packed_decode`` for one token a request and
``fused_sigmoid_gating_delta_rule_update`` for speculative decoding."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mambalab.kernels.causal_conv1d import causal_conv1d_update
from mambalab.kernels.causal_conv1d_ref import causal_conv1d_update_ref
from mambalab.kernels.gated_delta_rule import fused_sigmoid_gating_delta_rule_update
from mambalab.kernels.gated_delta_rule_packed import fused_recurrent_gated_delta_rule_packed_decode
from mambalab.kernels.gated_delta_rule_ref import fused_recurrent_gated_delta_rule_ref
from mambalab.model.config import TinyHybridConfig
from mambalab.model.decode_slots import _DecodeArgs
from mambalab.model.layers import _randn, _uniform
from mambalab.model.state import ModelState


class GatedDeltaNetMixer:
    """Qwen3-Next's gated delta net in miniature (``vllm/model_executor/models/qwen3_next.py``).

    ``in_proj`` gives ``q, k, v, a, b``; the conv runs over ``qkv``; the gates
    are ``g = -exp(A_log) * softplus(a + dt_bias)`` (a log-decay) and
    ``beta = sigmoid(b)``; the kernel L2-normalises ``q`` and ``k``. Grouped
    value attention: ``HV`` value heads share ``H`` query/key heads.
    """

    def __init__(self, cfg: TinyHybridConfig, gen: torch.Generator, device: torch.device) -> None:
        self.cfg = cfg
        d, HV = cfg.d_model, cfg.gdn_num_v_heads
        proj_out = cfg.gdn_conv_dim + 2 * HV
        w = {
            "in_proj": _randn(gen, proj_out, d, std=d ** -0.5),
            "conv_weight": _randn(gen, cfg.gdn_conv_dim, cfg.conv_width, std=0.5),
            "conv_bias": _randn(gen, cfg.gdn_conv_dim, std=0.1),
            "A_log": torch.log(_uniform(gen, HV, lo=0.5, hi=2.0)),
            "dt_bias": _uniform(gen, HV, lo=-1.5, hi=0.0),
            "out_proj": _randn(gen, d, cfg.gdn_value_dim, std=2.0 * cfg.gdn_value_dim ** -0.5),
        }
        for k, v in w.items():
            setattr(self, k, v.to(device))

    def split_projection(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``u (T, d_model)`` -> ``qkv (T, conv_dim)``, ``a (T, HV)``, ``b (T, HV)``."""
        cfg = self.cfg
        proj = u @ self.in_proj.t()
        HV = cfg.gdn_num_v_heads
        return torch.split(proj, [cfg.gdn_conv_dim, HV, HV], dim=-1)

    def gates(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``g = -exp(A_log) * softplus(a + dt_bias)``, ``beta = sigmoid(b)``."""
        g = -torch.exp(self.A_log) * F.softplus(a + self.dt_bias)
        return g, torch.sigmoid(b)

    def heads(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Token-major ``q, k (T, H, K)``, ``v (T, HV, V)`` from the conv output."""
        cfg = self.cfg
        T = qkv.shape[0]
        q, k, v = torch.split(qkv, [cfg.gdn_key_dim, cfg.gdn_key_dim, cfg.gdn_value_dim], dim=-1)
        H, HV = cfg.gdn_num_k_heads, cfg.gdn_num_v_heads
        return (q.reshape(T, H, cfg.gdn_head_k_dim), k.reshape(T, H, cfg.gdn_head_k_dim),
                v.reshape(T, HV, cfg.gdn_head_v_dim))

    def finish(self, o: torch.Tensor) -> torch.Tensor:
        return o.reshape(o.shape[0], -1) @ self.out_proj.t()

    def forward_ref(self, u: torch.Tensor, state: ModelState, slot: int) -> torch.Tensor:
        T = u.shape[0]
        idx = torch.tensor([slot], dtype=torch.int32, device=u.device)
        cu = torch.tensor([0, T], dtype=torch.int32, device=u.device)
        qkv, a, b = self.split_projection(u)
        qkv = causal_conv1d_update_ref(
            qkv, state.gdn_conv, self.conv_weight, self.conv_bias, "silu",
            conv_state_indices=idx, query_start_loc=cu, max_query_len=T,
        )
        q, k, v = self.heads(qkv)
        g, beta = self.gates(a, b)
        o, _ = fused_recurrent_gated_delta_rule_ref(
            q[None], k[None], v[None], g[None], beta[None],
            initial_state=state.gdn_recurrent, inplace_final_state=True,
            cu_seqlens=cu, ssm_state_indices=idx, use_qk_l2norm_in_kernel=True,
        )
        return self.finish(o[0])

    def forward_decode(self, u: torch.Tensor, state: ModelState, d: _DecodeArgs) -> torch.Tensor:
        qkv, a, b = self.split_projection(u)
        conv_idx = d.conv_index(state.gdn_conv)
        qkv = causal_conv1d_update(
            qkv, state.gdn_conv, self.conv_weight, self.conv_bias, "silu",
            conv_state_indices=conv_idx,
            num_accepted_tokens=d.num_accepted_tokens,
            query_start_loc=d.query_start_loc,
            max_query_len=d.max_query_len,
            out=torch.zeros_like(qkv),
            bugs=d.bugs,
        )
        idx = d.gdn_index(state.gdn_recurrent)
        # The kernel's early state load (read the pool before the previous kernel ends) only where nothing
        # just before writes that pool: a carry (mamba_cache_mode "all") has just copied states into it.
        early = not d.carry
        # As vLLM 0.33's layer: the gates computed in the kernel from a and b, so it follows the conv directly.
        if d.spec:  # varlen: one packed sequence axis, 2-D indices, one slot per token
            q, k, v = self.heads(qkv)
            o, _ = fused_sigmoid_gating_delta_rule_update(
                self.A_log, a[None], b[None], self.dt_bias, q[None], k[None], v[None],
                initial_state=state.gdn_recurrent, inplace_final_state=True,
                cu_seqlens=d.query_start_loc, ssm_state_indices=idx,
                num_accepted_tokens=d.num_accepted_tokens, use_qk_l2norm_in_kernel=True,
                bugs=d.bugs, early_state_load=early,
            )
            o = o[0]
            # Tokens past query_start_loc[-1] (CUDA-graph padding) belong to no
            # sequence and are left unwritten by the kernel: make them zeros.
            T = o.shape[0]
            valid = torch.arange(T, device=o.device) < d.query_start_loc[-1]
            o = torch.where(valid[:, None, None], o, torch.zeros_like(o))
        else:  # one token per row, q/k/v read from the conv's packed output
            cfg = self.cfg
            o = torch.empty(qkv.shape[0], 1, cfg.gdn_num_v_heads, cfg.gdn_head_v_dim, dtype=qkv.dtype,
                            device=qkv.device)
            fused_recurrent_gated_delta_rule_packed_decode(
                qkv, a, b, self.A_log, self.dt_bias, cfg.gdn_head_k_dim ** -0.5, state.gdn_recurrent, o, idx,
                use_qk_l2norm_in_kernel=True, bugs=d.bugs, early_state_load=early,
            )
            o = o[:, 0]
        return self.finish(o)
