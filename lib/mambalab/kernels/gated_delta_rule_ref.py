"""Pure-torch reference for the gated delta rule decode step (GDN, Qwen3-Next).

The Triton kernel in :mod:`mambalab.kernels.gated_delta_rule` mirrors vLLM's
copy of flash-linear-attention's ``fused_recurrent_gated_delta_rule``
(``vllm/model_executor/layers/fla/ops/fused_recurrent.py``, later
``vllm/third_party/flash_linear_attention/ops/fused_recurrent.py``). This file
is its ``naive.py``: one sequence at a time, one token at a time, written to be
read, not to be fast. It imports no Triton.

The recurrence, per value head ``hv`` (state ``h`` is ``V x K``, K innermost)::

    q, k   <- q / ||q||, k / ||k||            (only if use_qk_l2norm_in_kernel)
    q      <- q * scale                       (scale defaults to K ** -0.5)
    h      <- h * exp(g)                      (g <= 0: a log-decay)
    v'     <- beta * (v - h @ k)              (the delta rule: correct the memory)
    h      <- h + outer(v', k)
    o      <- h @ q

Grouped value attention (GVA): value head ``hv`` reads query/key head
``hv // (HV // H)``.

Where the state lives (the part that is about vLLM, not about maths):

* ``ssm_state_indices is None``: sequence ``n`` starts from ``initial_state[n]``.
* 1-D ``(N,)``: sequence ``n`` starts from slot ``indices[n]`` and (in place)
  the state after its last token is written back to the same slot.
* 2-D ``(N, C)`` (speculative decoding): sequence ``n`` starts from slot
  ``indices[n, num_accepted_tokens[n] - 1]`` (column 0 without
  ``num_accepted_tokens``) and the state after token ``t`` is written to slot
  ``indices[n, t]``: every token gets its own slot, so the next step can
  resume from whichever draft token was the last one accepted.

The guard (bugs #35431 and #39064) decides which slots may be touched:

* ``GuardMode.NULL`` (fixed, the ``<= 0`` / ``> 0`` of vLLM PR #39064): a
  sequence whose *load* index is the null block (or negative) is skipped
  entirely: nothing is read, nothing is written, and its output rows are
  zero-filled (upstream's packed decode kernel zero-fills and returns; its
  general kernel returns without writing). A null *store* column skips that
  one store.
* ``GuardMode.NEGATIVE`` (before #39064): only ``< 0`` is skipped, so a padded
  row (index 0) loads the null block as its initial state and stores into it.
  Several padded rows in one launch all race on block 0 on a GPU; here they
  run one after another, in order.
* ``GuardMode.NONE`` (the ``pad-minus-one`` world's consumer that trusts every
  index): a ``-1`` would reach address arithmetic. The reference refuses with
  an ``IndexError`` (torch would silently wrap ``-1`` to the last slot); the
  kernel on the interpreter raises ``mambalab.lab.sanitizer.IllegalMemoryAccess``.

With ``inplace_final_state=False`` nothing in ``initial_state`` is written and
a fresh ``final_state`` of shape ``[B * T, HV, V, K]`` is returned (one row per
token, the state after that token, like upstream's ``[T, HV, V, K]`` with
``B == 1``; for a one-token decode it is ``[N, HV, V, K]``). It has
``initial_state``'s dtype (float32 when there is no initial state). Rows of
skipped sequences are zeros.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mambalab.lab.bugs import GuardMode
from mambalab.constants import NULL_BLOCK_ID
from mambalab.kernels.ref_common import state_slot

STATE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
INDEX_DTYPES = (torch.int32, torch.int64)
L2NORM_EPS = 1e-6


@dataclass(frozen=True)
class GDNShapes:
    """What the host knows from shapes alone (never from index values)."""

    B: int  # batch dimension of q/k/v (1 with cu_seqlens)
    T: int  # tokens per sequence (total tokens with cu_seqlens)
    H: int  # query/key heads
    HV: int  # value heads (a multiple of H)
    K: int
    V: int
    N: int  # number of sequences
    varlen: bool
    index_columns: int  # 0: no indices, 1: 1-D indices, C: 2-D (N, C)


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def validate_gdn_inputs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor | None,
    scale: float | None,
    initial_state: torch.Tensor | None,
    inplace_final_state: bool,
    cu_seqlens: torch.Tensor | None,
    ssm_state_indices: torch.Tensor | None,
    num_accepted_tokens: torch.Tensor | None,
) -> GDNShapes:
    """Check shapes, dtypes and devices; raise ``ValueError``/``TypeError`` naming the argument.

    Only metadata is inspected: index *values* (slots, ``cu_seqlens``,
    ``num_accepted_tokens``) are never read, so the check costs no device
    synchronisation and never hides a bad index from the kernel's guard.
    """
    named = {"q": q, "k": k, "v": v, "g": g}
    for name, t in named.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.dtype.is_floating_point:
            raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")
    _need(q.dim() == 4, f"q must be [B, T, H, K], got shape {_shape(q)}")
    _need(k.shape == q.shape, f"k must have q's shape {_shape(q)}, got {_shape(k)}")
    B, T, H, K = q.shape
    _need(v.dim() == 4, f"v must be [B, T, HV, V], got shape {_shape(v)}")
    _need(
        v.shape[:2] == q.shape[:2],
        f"v must share q's [B, T] = {list(q.shape[:2])}, got v of shape {_shape(v)}",
    )
    HV, V = v.shape[2], v.shape[3]
    _need(H > 0 and K > 0 and V > 0 and HV > 0, f"empty head dimension: q {_shape(q)}, v {_shape(v)}")
    _need(
        HV % H == 0,
        f"v's head count HV={HV} must be a multiple of q/k's H={H} (grouped value attention)",
    )
    _need(g.shape == (B, T, HV), f"g must be [B, T, HV] = {[B, T, HV]}, got {_shape(g)}")
    if beta is not None:
        if not isinstance(beta, torch.Tensor) or not beta.dtype.is_floating_point:
            raise TypeError("beta must be a floating-point torch.Tensor or None")
        _need(
            beta.shape == (B, T, HV),
            f"beta must be [B, T, HV] = {[B, T, HV]}, got {_shape(beta)}",
        )
    if scale is not None:
        _need(float(scale) > 0, f"scale must be positive, got {scale}")

    tensors = dict(named, beta=beta, initial_state=initial_state, cu_seqlens=cu_seqlens,
                   ssm_state_indices=ssm_state_indices, num_accepted_tokens=num_accepted_tokens)
    for name, t in tensors.items():
        if t is not None and t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}")

    varlen = cu_seqlens is not None
    if varlen:
        _need(cu_seqlens.dim() == 1 and cu_seqlens.numel() >= 2,
              f"cu_seqlens must be 1-D (N + 1,) with N >= 1, got shape {_shape(cu_seqlens)}")
        if cu_seqlens.dtype not in INDEX_DTYPES:
            raise TypeError(f"cu_seqlens must be int32 or int64, got {cu_seqlens.dtype}")
        _need(B == 1, f"with cu_seqlens the batch size must be 1 (flatten the sequences), got B={B}")
        N = cu_seqlens.numel() - 1
    else:
        N = B

    columns = 0
    if ssm_state_indices is not None:
        if ssm_state_indices.dtype not in INDEX_DTYPES:
            raise TypeError(f"ssm_state_indices must be int32 or int64, got {ssm_state_indices.dtype}")
        _need(
            ssm_state_indices.dim() in (1, 2) and ssm_state_indices.shape[0] == N,
            f"ssm_state_indices must be (N,) or (N, C) with N={N} sequences, "
            f"got shape {_shape(ssm_state_indices)}",
        )
        columns = 1 if ssm_state_indices.dim() == 1 else ssm_state_indices.shape[1]
        _need(columns >= 1, "ssm_state_indices has zero columns")
        if ssm_state_indices.dim() == 2 and not varlen:
            _need(
                T <= columns,
                f"2-D ssm_state_indices stores one slot per token: it needs >= T={T} columns, "
                f"got {columns}",
            )
        _need(initial_state is not None, "ssm_state_indices needs initial_state (the state pool)")
    if num_accepted_tokens is not None:
        _need(
            ssm_state_indices is not None and ssm_state_indices.dim() == 2,
            "num_accepted_tokens (speculative decoding) needs 2-D ssm_state_indices (N, C)",
        )
        if num_accepted_tokens.dtype not in INDEX_DTYPES:
            raise TypeError(f"num_accepted_tokens must be int32 or int64, got {num_accepted_tokens.dtype}")
        _need(num_accepted_tokens.dim() == 1 and num_accepted_tokens.shape[0] == N,
              f"num_accepted_tokens must be (N,) = ({N},), got shape {_shape(num_accepted_tokens)}")

    if initial_state is not None:
        if not isinstance(initial_state, torch.Tensor):
            raise TypeError(f"initial_state must be a torch.Tensor, got {type(initial_state).__name__}")
        if initial_state.dtype not in STATE_DTYPES:
            raise TypeError(f"initial_state must be float32, bfloat16 or float16, got {initial_state.dtype}")
        _need(
            initial_state.dim() == 4 and tuple(initial_state.shape[1:]) == (HV, V, K),
            f"initial_state must be [slots, HV, V, K] = [slots, {HV}, {V}, {K}] (K innermost), "
            f"got {_shape(initial_state)}",
        )
        if ssm_state_indices is None:
            _need(
                initial_state.shape[0] >= N,
                f"without ssm_state_indices sequence n uses initial_state[n]: need >= {N} rows, "
                f"got {initial_state.shape[0]}",
            )
    return GDNShapes(B=B, T=T, H=H, HV=HV, K=K, V=V, N=N, varlen=varlen, index_columns=columns)


def fused_recurrent_gated_delta_rule_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor | None = None,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    inplace_final_state: bool = True,
    cu_seqlens: torch.Tensor | None = None,
    ssm_state_indices: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    *,
    null_block_id: int = NULL_BLOCK_ID,
    guard: GuardMode = GuardMode.NULL,
    bound_accepted: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference for :func:`mambalab.kernels.gated_delta_rule.fused_recurrent_gated_delta_rule`.

    Same arguments and results (see the module docstring), plus ``guard``
    (a :class:`GuardMode`) and ``bound_accepted`` (``BugConfig.bound_accepted``)
    instead of a bug configuration. ``bound_accepted`` (fixed, #50021's masked
    load): a column ``num_accepted - 1`` outside the row reads as the null block,
    so the row is skipped as padding is. Without it (every release up to 0.33) the
    column is read from the row-major index tensor as the kernel's pointer does:
    column -1 is the previous row's last column, and row 0's is before the tensor
    (``IndexError``; the kernel on the interpreter: ``IllegalMemoryAccess``). Computes in float32,
    keeps the running state in float32 between tokens and rounds only what it
    stores, exactly like the kernel. With ``inplace_final_state`` it writes
    into ``initial_state`` and returns it.
    """
    shapes = validate_gdn_inputs(q, k, v, g, beta, scale, initial_state, inplace_final_state,
                                 cu_seqlens, ssm_state_indices, num_accepted_tokens)
    B, T, H, HV, K, V, N = shapes.B, shapes.T, shapes.H, shapes.HV, shapes.K, shapes.V, shapes.N
    guard = GuardMode(guard)
    group = HV // H
    scale = K ** -0.5 if scale is None else float(scale)
    if beta is None:
        beta = torch.ones_like(g)

    # Flatten [B, T] into one token axis: sequence n owns tokens [bos, eos).
    def flat(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(B * T, *x.shape[2:]).float()

    qf, kf, vf, gf, bf = flat(q), flat(k), flat(v), flat(g), flat(beta)
    if cu_seqlens is not None:
        bounds = [int(x) for x in cu_seqlens.tolist()]
    else:
        bounds = [n * T for n in range(N + 1)]

    o = torch.zeros(B * T, HV, V, dtype=torch.float32, device=q.device)
    state_dtype = initial_state.dtype if initial_state is not None else torch.float32
    in_place = inplace_final_state and initial_state is not None
    fresh = None
    if not in_place:
        fresh = torch.zeros(B * T, HV, V, K, dtype=state_dtype, device=q.device)

    idx = ssm_state_indices
    per_token_slots = idx is not None and idx.dim() == 2

    for n in range(N):
        bos, eos = bounds[n], bounds[n + 1]
        if eos <= bos:
            continue  # no tokens: nothing read, nothing written

        # -- where this sequence's state comes from ---------------------------
        if idx is None:
            load_slot = n
        elif per_token_slots:
            col = int(num_accepted_tokens[n]) - 1 if num_accepted_tokens is not None else 0
            C = idx.shape[1]
            if 0 <= col < C:
                load_slot = int(idx[n, col])
            elif bound_accepted:
                load_slot = 0  # #50021: the masked load's other=0, the null block
            else:
                # where the kernel's unbounded pointer lands: n * stride(0) + col * stride(1)
                at = idx.storage_offset() + n * idx.stride(0) + col * idx.stride(1)
                if not 0 <= at < idx.untyped_storage().nbytes() // idx.element_size():
                    raise IndexError(f"sequence {n}: num_accepted_tokens - 1 = {col} reads outside "
                                     f"the storage of ssm_state_indices")
                load_slot = int(torch.as_strided(idx, (1,), (1,), at)[0])
        else:
            load_slot = int(idx[n])
        if idx is not None and not GuardMode(guard).is_live(load_slot, null_block_id):
            continue  # skipped: output rows (and fresh final-state rows) stay zero

        if initial_state is None:
            h = torch.zeros(HV, V, K, dtype=torch.float32, device=q.device)
        else:
            h = state_slot(initial_state, load_slot, f"sequence {n}: load").float().clone()

        # -- the recurrence, one token at a time ------------------------------
        for t in range(bos, eos):
            qt = qf[t].repeat_interleave(group, dim=0)  # [HV, K]: GVA
            kt = kf[t].repeat_interleave(group, dim=0)  # [HV, K]
            if use_qk_l2norm_in_kernel:
                qt = qt / torch.sqrt((qt * qt).sum(-1, keepdim=True) + L2NORM_EPS)
                kt = kt / torch.sqrt((kt * kt).sum(-1, keepdim=True) + L2NORM_EPS)
            qt = qt * scale
            h = h * torch.exp(gf[t])[:, None, None]  # decay
            hk = torch.einsum("hvk,hk->hv", h, kt)  # what the memory predicts for k
            v_new = bf[t][:, None] * (vf[t] - hk)  # delta rule correction
            h = h + v_new[:, :, None] * kt[:, None, :]  # rank-1 write
            o[t] = torch.einsum("hvk,hk->hv", h, qt)

            if fresh is not None:
                fresh[t] = h.to(state_dtype)
            elif per_token_slots:
                col = t - bos
                if col < idx.shape[1]:
                    store_slot = int(idx[n, col])
                    if GuardMode(guard).is_live(store_slot, null_block_id):
                        state_slot(initial_state, store_slot, f"sequence {n} token {col}: store").copy_(h)

        if in_place and not per_token_slots:
            store_slot = load_slot
            state_slot(initial_state, store_slot, f"sequence {n}: store").copy_(h)

    o = o.reshape(B, T, HV, V).to(v.dtype)
    return o, (initial_state if in_place else fresh)


def sigmoid_gating(
    A_log: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    dt_bias: torch.Tensor,
    softplus_beta: float = 1.0,
    threshold: float = 20.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Qwen3-Next's gates: ``g = -exp(A_log) * softplus(a + dt_bias)``, ``beta = sigmoid(b)``.

    ``softplus(x) = log(1 + exp(softplus_beta * x)) / softplus_beta``, linear
    where ``softplus_beta * x > threshold`` (torch's and upstream's rule).
    Returns float32 ``(g, beta)`` shaped like ``a``.
    """
    x = a.float() + dt_bias.float()
    g = -torch.exp(A_log.float()) * F.softplus(x, beta=softplus_beta, threshold=threshold)
    return g, torch.sigmoid(b.float())


def fused_sigmoid_gating_delta_rule_update_ref(
    A_log: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    dt_bias: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: float = 1.0,
    threshold: float = 20.0,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    inplace_final_state: bool = True,
    cu_seqlens: torch.Tensor | None = None,
    ssm_state_indices: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    use_qk_l2norm_in_kernel: bool = False,
    *,
    null_block_id: int = NULL_BLOCK_ID,
    guard: GuardMode = GuardMode.NULL,
    bound_accepted: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference for the fused-gating variant: compute the gates, then the recurrence.

    ``beta`` here is softplus's sharpness (upstream's name), not the delta-rule
    beta, which is ``sigmoid(b)``.
    """
    g, beta_gate = sigmoid_gating(A_log, a, b, dt_bias, beta, threshold)
    return fused_recurrent_gated_delta_rule_ref(
        q, k, v, g, beta_gate, scale, initial_state, inplace_final_state, cu_seqlens,
        ssm_state_indices, num_accepted_tokens, use_qk_l2norm_in_kernel,
        null_block_id=null_block_id, guard=guard, bound_accepted=bound_accepted,
    )


def gated_delta_rule_closed_form(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    h0: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same recurrence for ONE sequence written as products of transition matrices.

    ``q, k: [T, HV, K]`` (already head-expanded and normalised), ``v: [T, HV, V]``,
    ``g, beta: [T, HV]``, ``h0: [HV, V, K]``. The delta rule is linear in the
    state: ``h_t = h_{t-1} A_t + beta_t v_t k_t^T`` with
    ``A_t = exp(g_t) (I - beta_t k_t k_t^T)``. Unrolling gives
    ``h_t = h0 P_{1..t} + sum_s beta_s v_s k_s^T P_{s+1..t}``. A second,
    independent derivation used by the tests to check the recurrent reference.
    Returns ``(o [T, HV, V], h_T [HV, V, K])`` in float64.
    """
    q, k, v, g, beta, h0 = (x.double() for x in (q, k, v, g, beta, h0))
    T, HV, K = k.shape
    eye = torch.eye(K, dtype=torch.float64, device=k.device).expand(HV, K, K)
    A = torch.exp(g)[..., None, None] * (eye - beta[..., None, None] * k[..., :, None] * k[..., None, :])
    U = beta[..., None, None] * v[..., :, None] * k[..., None, :]  # [T, HV, V, K]
    outs = []
    for t in range(T):
        P = eye.clone()
        h = torch.zeros_like(h0)
        # walk s from t down to 0, accumulating the transition product on the right
        for s in range(t, -1, -1):
            h = h + U[s] @ P
            P = A[s] @ P
        h = h + h0 @ P
        outs.append(torch.einsum("hvk,hk->hv", h, q[t] * scale))
        if t == T - 1:
            h_final = h
    return torch.stack(outs), h_final


__all__ = [
    "GDNShapes",
    "validate_gdn_inputs",
    "fused_recurrent_gated_delta_rule_ref",
    "fused_sigmoid_gating_delta_rule_update_ref",
    "sigmoid_gating",
    "gated_delta_rule_closed_form",
]
