"""fla-core's ``fused_recurrent_gated_delta_rule`` as the bench's third GDN implementation, with its own gate.

fla-core has no slot indices: each sequence's fp32 state is dense (``initial_state`` ``[N, HV, K, V]``) and the
final state is a fresh tensor, so it cannot share the GDN case's pools and the vLLM/mambalab agreement gate
(:func:`mambalab.gpu.bench_cases.agreement`). Its gate here compares it with the one-token gated delta rule
written out in torch (:func:`step_reference`), on the very inputs it is timed on.

Every argument goes by keyword. fla-core 0.6.0's signature is ``(q, k, v, g, gk, gv, beta, ...)``; a call passing
``beta`` fifth, as vLLM 0.33's copy of the function takes it, binds it to ``gk`` (a per-key decay
``[B, T, HV, K]``): the kernel then reads 128 values a head from a ``[B, T, HV]`` tensor, far past its end, and
runs with ``beta`` all ones. The bench did exactly that until call 258 of docs/results/gpu-session-notes.md found
it under compute-sanitizer (its "illegal memory access at fla-core's batch 128" of calls 251-257 was that read
landing on an unmapped page).
"""

from __future__ import annotations

import torch

from mambalab.gpu.bench_cases import GDN


def inputs(active: int, device: str = "cuda") -> dict[str, torch.Tensor]:
    """One decode token for each of ``active`` sequences, as fla-core takes a batch of length-1 sequences
    (``q``/``k``: ``[N, 1, H, K]``, ``v``: ``[N, 1, HV, V]``, ``g``/``beta``: ``[N, 1, HV]``; no ``cu_seqlens``,
    as the bench has called it since its faults with them, at 64 after 57 and 257 after 256, then put down to fla
    caching by tensor identity and most likely the same read past ``beta``: not re-run)."""
    H, HV, K, V = GDN["H"], GDN["HV"], GDN["K"], GDN["V"]
    return dict(
        q=torch.randn(active, 1, H, K, device=device, dtype=torch.bfloat16),
        k=torch.nn.functional.normalize(torch.randn(active, 1, H, K, device=device), dim=-1).to(torch.bfloat16),
        v=torch.randn(active, 1, HV, V, device=device, dtype=torch.bfloat16),
        g=-torch.rand(active, 1, HV, device=device) * 0.1,
        beta=torch.rand(active, 1, HV, device=device).to(torch.bfloat16))


def nbytes(active: int) -> int:
    """Bytes of state a launch moves: each sequence's fp32 ``[HV, K, V]`` state read, a fresh one written."""
    return active * 2 * GDN["HV"] * GDN["K"] * GDN["V"] * 4


def call(fn, x: dict[str, torch.Tensor], initial_state: torch.Tensor):
    """fla-core's ``fn`` on ``x`` from ``initial_state``, every tensor by keyword; returns ``(o, final_state)``."""
    return fn(q=x["q"], k=x["k"], v=x["v"], g=x["g"], beta=x["beta"], initial_state=initial_state,
              output_final_state=True)


def calls(fn, x: dict[str, torch.Tensor], pools: list[torch.Tensor]) -> list:
    """One launch a pool (:func:`call`), for a graph over the pools."""
    return [(lambda p=p: call(fn, x, p)) for p in pools]


def step_reference(x: dict[str, torch.Tensor], h0: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated delta rule's one token in fp32: ``h = h0 exp(g)``, ``u = beta (v - k.h)``, ``h += k u``,
    ``o = (q / sqrt(K)).h``; a value head reads key head ``hv // (HV / H)``. Returns ``(o, h)`` as fla-core
    lays them out (``o`` in ``v``'s dtype)."""
    q, k, v = (x[n][:, 0].float() for n in ("q", "k", "v"))
    group = v.shape[1] // q.shape[1]
    q, k = q.repeat_interleave(group, dim=1), k.repeat_interleave(group, dim=1)
    g, beta = x["g"][:, 0].float(), x["beta"][:, 0].float()
    h = h0.float() * g.exp()[..., None, None]
    u = beta[..., None] * (v - torch.einsum("nhkv,nhk->nhv", h, k))
    h = h + k[..., None] * u[..., None, :]
    o = torch.einsum("nhkv,nhk->nhv", h, q * q.shape[-1] ** -0.5)
    return o[:, None].to(x["v"].dtype), h


def agreement(fn, x: dict[str, torch.Tensor], h0: torch.Tensor) -> tuple[bool, str]:
    """fla-core's output and final state against :func:`step_reference` from ``h0`` (left unchanged), at the
    GDN's bf16 output and fp32 state tolerances."""
    from mambalab.kernels.testing import tolerance

    o, h = call(fn, x, h0.clone())
    o_ref, h_ref = step_reference(x, h0)
    msgs = []
    for name, got, want in (("output", o, o_ref), ("final state", h, h_ref)):
        rtol, atol = tolerance("gdn", want.dtype)
        if got.shape != want.shape or not torch.allclose(got.float(), want.float(), rtol=rtol, atol=atol):
            err = (got.float() - want.float()).abs().max().item() if got.shape == want.shape else float("nan")
            msgs.append(f"fla-core's {name} differs from the reference (shape {tuple(got.shape)}, max |diff| "
                        f"{err:.3g})")
    return not msgs, "; ".join(msgs)


__all__ = ["inputs", "nbytes", "call", "calls", "step_reference", "agreement"]
