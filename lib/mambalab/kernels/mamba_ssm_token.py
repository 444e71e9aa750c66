"""Mamba2's token step, the piece every SSU kernel shares: one token of the recurrence on a register tile of a
(request, head) state, its loads (:func:`_ssu_token_inputs`) apart from its arithmetic (:func:`_ssu_token_math`) so a
caller can issue several tokens' loads before any store (:mod:`mambalab.kernels.mamba_ssm_spec`). The maths is
upstream's ``_selective_scan_update_kernel`` (vLLM 0.33's ``vllm/model_executor/layers/mamba/ops/mamba_ssm.py``);
the pure-torch reference is :mod:`mambalab.kernels.mamba_ssm_ref`.

A streaming kernel that walked a program's state blocks through a pipelined loop lived here until issue 14's call
121 found the capped token loop faster at every batch it took (``git show 7362153:lib/mambalab/kernels/
mamba_ssm_stream.py``; docs/benchmarks.md, "Streaming kernels for speculative decoding").
"""

from __future__ import annotations

import mambalab  # noqa: F401  (sets TRITON_INTERPRET before any kernel is defined)

import triton
import triton.language as tl

from mambalab.kernels.mamba_ssm_kernels import _softplus


@triton.jit
def _ssu_token_inputs(x_ptrs, B_ptrs, C_ptrs, dt_ptrs, z_ptrs, mask_m, mask_n,
                      TIE_HDIM: tl.constexpr, HAS_Z: tl.constexpr):
    """One token's inputs as loaded (``x``, ``z``, ``B``, ``C``, ``dt``; ``z`` is ``x`` without a gate): the loads
    of :func:`_ssu_token`, apart so a caller can issue several tokens' loads before any store."""
    x = tl.load(x_ptrs, mask=mask_m, other=0.0)
    if HAS_Z:
        z = tl.load(z_ptrs, mask=mask_m, other=0.0)
    else:
        z = x  # never used (HAS_Z is off)
    B = tl.load(B_ptrs, mask=mask_n, other=0.0)
    C = tl.load(C_ptrs, mask=mask_n, other=0.0)
    if TIE_HDIM:
        dt = tl.load(dt_ptrs)  # one scalar per head
    else:
        dt = tl.load(dt_ptrs, mask=mask_m, other=0.0)
    return x, z, B, C, dt


@triton.jit
def _ssu_token_math(state, x, z, B, C, dt, A, dt_bias, D,
                    TIE_HDIM: tl.constexpr, HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr,
                    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, FAST_SOFTPLUS: tl.constexpr = False):
    """One token of the recurrence on a register tile, from its loaded inputs: (new state, output rows), fp32."""
    x = x.to(tl.float32)
    B = B.to(tl.float32)
    C = C.to(tl.float32)
    dt = dt.to(tl.float32)
    if HAS_DT_BIAS:
        dt += dt_bias
    if DT_SOFTPLUS:
        dt = _softplus(dt, FAST_SOFTPLUS)
    if TIE_HDIM:
        dA = tl.exp(A * dt)  # a scalar, not a tile
        dBx = (B * dt)[None, :] * x[:, None]
    else:
        # One exponential per state element: exp2 on the pre-scaled argument is one ex2.approx
        # instruction, where tl.exp goes through libdevice's range-checked expf (vLLM's
        # triton_helpers.fast_exp does the same). On an H200 this path ran at 78-80% of copy with
        # tl.exp against 86-89% for vLLM's kernel (docs/benchmarks.md, issue 14).
        # The per-row factors are formed first (dt * log2(e), dt * x: BLOCK_M values), so each state
        # element costs one multiply for dA and one for dBx, not two each (the kernel is issue-bound here).
        dA = tl.math.exp2(A * (dt * 1.4426950408889634)[:, None])
        dBx = B[None, :] * (dt * x)[:, None]
    state = state * dA + dBx
    out = tl.sum(state * C[None, :], axis=1)
    if HAS_D:
        out += D * x
    if HAS_Z:
        z = z.to(tl.float32)
        out *= z * tl.sigmoid(z)
    return state, out


@triton.jit
def _ssu_token(state, x_ptrs, B_ptrs, C_ptrs, dt_ptrs, z_ptrs, A, dt_bias, D, mask_m, mask_n,
               TIE_HDIM: tl.constexpr, HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr,
               HAS_D: tl.constexpr, HAS_Z: tl.constexpr, FAST_SOFTPLUS: tl.constexpr = False):
    """One token of the recurrence on a register tile: returns (new state, output rows), fp32. The gate ``z`` is
    loaded with ``x``, so its latency hides behind the state update (call 72, H200, bf16 state with ``z``: batch
    8 / 16 / 64 / 256 1.006 / 1.058 / 1.037 / 1.044 -> 1.063 / 1.102 / 1.072 / 1.074x of vLLM; fp32 even)."""
    x, z, B, C, dt = _ssu_token_inputs(x_ptrs, B_ptrs, C_ptrs, dt_ptrs, z_ptrs, mask_m, mask_n, TIE_HDIM, HAS_Z)
    return _ssu_token_math(state, x, z, B, C, dt, A, dt_bias, D, TIE_HDIM, HAS_DT_BIAS, DT_SOFTPLUS, HAS_D, HAS_Z,
                           FAST_SOFTPLUS)
