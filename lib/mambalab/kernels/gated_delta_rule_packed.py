"""The GDN decode step as vLLM 0.33's Qwen3-Next layer calls it: ``fused_recurrent_gated_delta_rule_packed_decode``.

Mirrors ``vllm/third_party/flash_linear_attention/ops/fused_recurrent.py`` (vLLM 0.33), the kernel that
``qwen_gdn_linear_attn.py``'s ``_forward_core_decode_non_spec`` runs for a decode-only batch without speculation
(``VLLM_ENABLE_FLA_PACKED_RECURRENT_DECODE``, on by default). One token a request; ``q``, ``k`` and ``v`` read
from the conv's packed output ``mixed_qkv`` (``[q | k | v]`` along the last dimension), the gates computed in the
kernel from the raw projections ``a`` and ``b`` (``g = -exp(A_log) softplus(a + dt_bias)``, ``beta =
sigmoid(b)``), the output written into ``out``. So the kernel directly follows the conv, with no torch op between
them to split the projection or compute the gates.

Here it is a view of the same step: the packed tensor is cut into strided views (every stride is honoured) and
:func:`mambalab.kernels.gated_delta_rule._launch` runs it with the gates in the kernel, on the streaming kernel
on a GPU (:data:`~mambalab.kernels.gated_delta_rule.STREAM`). Upstream's kernel skips a request whose slot is
``<= 0`` (writing zero outputs), which is the fixed guard here; ``bugs`` plants the pre-fix ones.
"""

from __future__ import annotations

import torch

from mambalab.constants import NULL_BLOCK_ID
from mambalab.kernels.gated_delta_rule import _launch
from mambalab.kernels.gated_delta_rule_tma import launch as tma_launch, routed_shape
from mambalab.kernels.gated_delta_rule_ref import fused_sigmoid_gating_delta_rule_update_ref
from mambalab.lab.bugs import BugConfig, GuardMode


def _unpack(mixed_qkv, a, b, A_log, dt_bias, initial_state, ssm_state_indices):
    """Check the packed call's arguments (``ValueError`` / ``TypeError`` naming the argument) and return
    ``(q, k, v, a, b)`` as ``[N, 1, heads, dim]`` / ``[N, 1, HV]`` views."""
    tensors = dict(mixed_qkv=mixed_qkv, a=a, b=b, A_log=A_log, dt_bias=dt_bias, initial_state=initial_state,
                   ssm_state_indices=ssm_state_indices)
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.device != mixed_qkv.device:
            raise ValueError(f"{name} is on {t.device} but mixed_qkv is on {mixed_qkv.device}")
    if mixed_qkv.dim() != 2 or mixed_qkv.stride(-1) != 1:
        raise ValueError(f"mixed_qkv must be 2-D [N, qkv_dim] with stride(-1) == 1, got {tuple(mixed_qkv.shape)}")
    if initial_state.dim() != 4:
        raise ValueError(f"initial_state must be [slots, HV, V, K], got {tuple(initial_state.shape)}")
    N = mixed_qkv.shape[0]
    HV, V, K = initial_state.shape[-3:]
    for name, t in (("a", a), ("b", b)):
        if t.shape != (N, HV):
            raise ValueError(f"{name} must be [N, HV] = [{N}, {HV}], got {tuple(t.shape)}")
    if ssm_state_indices.shape != (N,):
        raise ValueError(f"ssm_state_indices must be (N,) = ({N},) for the packed decode, "
                         f"got {tuple(ssm_state_indices.shape)}")
    qk = mixed_qkv.shape[1] - HV * V
    if qk <= 0 or qk % (2 * K):
        raise ValueError(f"mixed_qkv's last dim {mixed_qkv.shape[1]} is not 2 * H * K + HV * V "
                         f"for HV={HV}, V={V}, K={K}")
    H = qk // (2 * K)
    if HV % H:
        raise ValueError(f"HV={HV} is not a multiple of H={H} (inferred from mixed_qkv)")
    q = mixed_qkv[:, : H * K].unflatten(-1, (H, K))[:, None]
    k = mixed_qkv[:, H * K: 2 * H * K].unflatten(-1, (H, K))[:, None]
    v = mixed_qkv[:, 2 * H * K:].unflatten(-1, (HV, V))[:, None]
    return q, k, v, a[:, None], b[:, None]


def fused_recurrent_gated_delta_rule_packed_decode(
    mixed_qkv: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    scale: float,
    initial_state: torch.Tensor,
    out: torch.Tensor,
    ssm_state_indices: torch.Tensor,
    use_qk_l2norm_in_kernel: bool = False,
    *,
    null_block_id: int = NULL_BLOCK_ID,
    bugs: BugConfig | None = None,
    early_state_load: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One decode step of N requests, in place on the pool, as vLLM 0.33's packed decode.

    Args:
        mixed_qkv: ``[N, 2 H K + HV V]``, the conv's output (``q``, then ``k``, then ``v``).
        a, b: ``[N, HV]`` raw gate projections. A_log, dt_bias: ``(HV,)``.
        scale: the query scale (upstream passes ``K ** -0.5``).
        initial_state: the pool ``[slots, HV, V, K]``, updated in place.
        out: ``[N, 1, HV, V]``, contiguous: the outputs (zeros for a skipped request).
        ssm_state_indices: ``(N,)`` slots.
        early_state_load: as :func:`~mambalab.kernels.gated_delta_rule.fused_recurrent_gated_delta_rule`'s.

    Returns ``(out, initial_state)``.
    """
    q, k, v, a3, b3 = _unpack(mixed_qkv, a, b, A_log, dt_bias, initial_state, ssm_state_indices)
    N, HV, V = q.shape[0], v.shape[2], v.shape[3]
    if not isinstance(out, torch.Tensor) or out.shape != (N, 1, HV, V) or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous [N, 1, HV, V] = [{N}, 1, {HV}, {V}] tensor, got "
                         f"{tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__}")
    if out.device != mixed_qkv.device or not out.dtype.is_floating_point:
        raise ValueError(f"out must be a floating-point tensor on {mixed_qkv.device}")
    for name, t in (("A_log", A_log), ("dt_bias", dt_bias)):
        if t.shape != (HV,):
            raise ValueError(f"{name} must be a tensor of shape (HV,) = ({HV},), got {tuple(t.shape)}")
    shape = routed_shape(mixed_qkv, a, b, A_log, dt_bias, initial_state, out, ssm_state_indices,
                         bugs, early_state_load)
    if shape is not None:  # the CUDA kernel with TMA where its launch rule (or an A/B's FORCE) says so; checked above
        tma_launch(mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, out, ssm_state_indices,
                   use_qk_l2norm_in_kernel, null_block_id, shape, q.shape[2])
        return out, initial_state
    _launch(q, k, v, a3, b3, scale, initial_state, True, None, ssm_state_indices, None, use_qk_l2norm_in_kernel,
            null_block_id, bugs, A_log=A_log.contiguous(), dt_bias=dt_bias.contiguous(),
            early_state_load=early_state_load, out=out, name="fused_recurrent_gated_delta_rule_packed_decode")
    return out, initial_state


def fused_recurrent_gated_delta_rule_packed_decode_ref(
    mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, out, ssm_state_indices, use_qk_l2norm_in_kernel=False,
    *, null_block_id: int = NULL_BLOCK_ID, guard: GuardMode = GuardMode.NULL,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The pure-torch reference: the same views, then the fused-gating reference."""
    q, k, v, a3, b3 = _unpack(mixed_qkv, a, b, A_log, dt_bias, initial_state, ssm_state_indices)
    o, _ = fused_sigmoid_gating_delta_rule_update_ref(
        A_log, a3, b3, dt_bias, q, k, v, scale=scale, initial_state=initial_state, inplace_final_state=True,
        ssm_state_indices=ssm_state_indices, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        null_block_id=null_block_id, guard=guard)
    out.copy_(o.reshape(out.shape))
    return out, initial_state


__all__ = ["fused_recurrent_gated_delta_rule_packed_decode", "fused_recurrent_gated_delta_rule_packed_decode_ref"]
