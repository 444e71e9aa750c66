"""The bench's configurations as inputs: one :class:`Case` per kernel (SSU, GDN, conv) holding the inputs
every implementation (mambalab, vLLM 0.33) is called on, and the agreement gate that compares them before any
timing. The timing harness, the rows and the command line are :mod:`mambalab.gpu.bench`.
"""

from __future__ import annotations

import torch

from mambalab.lab.bugs import BugConfig
from mambalab.constants import NULL_BLOCK_ID

# -- shapes (kernels.md) -----------------------------------------------------------
SSU = dict(nheads=128, headdim=64, dstate=128, ngroups=8)  # NemotronH-8B class
GDN = dict(H=16, HV=32, K=128, V=128)  # Qwen3-Next TP1
CONV = dict(dim=8192, width=4)  # Qwen3-Next


def _indices(active: int, captured: int) -> torch.Tensor:
    idx = torch.full((captured,), NULL_BLOCK_ID, dtype=torch.int32)
    idx[:active] = torch.randperm(active, dtype=torch.int32) + 1
    return idx.cuda()


def _esize(dtype: torch.dtype) -> int:
    return torch.tensor([], dtype=dtype).element_size()


class Case:
    """One configuration's inputs, shared by every implementation (so the gate compares like with like).

    ``call(impl, pool, bugs)`` is one launch of an implementation on ``pool``; ``make_pools(L)`` the
    ``L`` pools of a cold-cache graph; ``live_slots`` / ``live_out`` what the gate compares.
    """

    kernel = ""
    nbytes = 0
    pool_bytes = 0
    out_bytes = 0  # > 0: every implementation allocates its output itself (no ``out``), of this many bytes

    def __init__(self, pools: str):
        self.pools_mode = pools
        self._base: torch.Tensor | None = None

    def new_pool(self) -> torch.Tensor:  # pragma: no cover - per kernel
        raise NotImplementedError

    def make_pools(self, n: int) -> list[torch.Tensor]:
        if self.pools_mode == "cloned":
            if self._base is None:
                self._base = self.new_pool(scale=1.0)
            return [self._base.clone() for _ in range(n)]
        return [self.new_pool(scale=0.1) for _ in range(n)]


class SSUCase(Case):
    """``selective_state_update`` as ``mamba_mixer2`` calls it (``A``, ``dt``, ``dt_bias``, ``D`` per head)."""

    kernel = "ssu"

    def __init__(self, active, captured, state, act, z=True, pools="fresh", tokens=1, dt="head", shape=None):
        super().__init__(pools)
        s = shape or SSU  # another model's or rank's (mambalab.gpu.model_shapes)
        nh, hd, ds, ng = s["nheads"], s["headdim"], s["dstate"], s["ngroups"]
        dev = "cuda"
        self.state_dtype, self.T = state, tokens
        if tokens == 1:
            ntok, self.slots = captured, captured + 1
            self.idx = _indices(active, captured)
            self.num_acc = self.cu = None
        else:  # speculative decoding: request r owns slots idx[r, :], reads column num_accepted - 1
            ntok, self.slots = active * tokens, active * tokens + 1
            self.idx = (torch.randperm(active * tokens, dtype=torch.int32) + 1).view(active, tokens).cuda()
            self.num_acc = torch.randint(1, tokens + 1, (active,), dtype=torch.int32).cuda()
            self.cu = torch.arange(0, ntok + 1, tokens, dtype=torch.int32, device=dev)
        self.active = active
        self.x = torch.randn(ntok, nh, hd, device=dev, dtype=act)
        if dt == "head":  # mamba_mixer2's decode call: one value per head, broadcast (stride 0)
            self.dt = torch.randn(ntok, nh, device=dev, dtype=act)[:, :, None].expand(ntok, nh, hd)
            self.A = (-torch.rand(nh, device=dev))[:, None, None].expand(nh, hd, ds)
            self.dt_bias = torch.randn(nh, device=dev)[:, None].expand(nh, hd)
            self.D = torch.randn(nh, device=dev)[:, None].expand(nh, hd)
        else:  # "element": full tensors (vLLM's kernel tests and tuning benchmark make them so)
            self.dt = torch.randn(ntok, nh, hd, device=dev, dtype=act)
            self.A = -torch.rand(nh, hd, ds, device=dev)
            self.dt_bias = torch.randn(nh, hd, device=dev)
            self.D = torch.randn(nh, hd, device=dev)
        self.B = torch.randn(ntok, ng, ds, device=dev, dtype=act)
        self.C = torch.randn(ntok, ng, ds, device=dev, dtype=act)
        self.z = torch.randn(ntok, nh, hd, device=dev, dtype=act) if z else None
        self.out = torch.empty_like(self.x)
        self.shape = (self.slots, nh, hd, ds)
        state_bytes = nh * hd * ds * _esize(state)
        self.pool_bytes = self.slots * state_bytes
        self.nbytes = active * (2 if tokens == 1 else 1 + tokens) * state_bytes

    def new_pool(self, scale=0.1):
        p = torch.randn(self.shape, device="cuda", dtype=self.state_dtype)
        return p.mul_(scale) if scale != 1.0 else p

    def call(self, impl, pool, bugs=None):
        kw = dict(z=self.z, dt_softplus=True, state_batch_indices=self.idx, out=self.out)
        if self.T > 1:
            kw.update(dst_state_batch_indices=self.idx, num_accepted_tokens=self.num_acc, cu_seqlens=self.cu)
        if impl == "vllm":
            from vllm.model_executor.layers.mamba.ops.mamba_ssm import selective_state_update as fn  # type: ignore

            return fn(pool, self.x, self.dt, self.A, self.B, self.C, self.D, self.dt_bias, **kw)
        from mambalab.kernels.mamba_ssm import selective_state_update

        # early_state_load: mambalab's Mamba2 layer makes that promise (the conv before the SSU writes neither
        # the SSM state nor the indices); here each launch of a timed graph updates its own pool.
        return selective_state_update(pool, self.x, self.dt, self.A, self.B, self.C, self.D, dt_bias=self.dt_bias,
                                      bugs=bugs, early_state_load=True, **kw)

    def live_out(self):
        return self.out[: self.active * self.T]

    def live_slots(self):
        return self.idx[: self.active].reshape(-1).long()


class GDNCase(Case):
    """The GDN decode step as vLLM 0.33's Qwen3-Next layer runs it (``qwen_gdn_linear_attn.py``), the gates
    computed in the kernel from the raw projections ``a``, ``b`` and the parameters ``A_log``, ``dt_bias``.

    One token a request: ``fused_recurrent_gated_delta_rule_packed_decode`` on the conv's packed output
    (``_forward_core_decode_non_spec``, the default decode path). Several (speculative decoding):
    ``fused_sigmoid_gating_delta_rule_update`` on contiguous ``q``/``k``/``v`` (upstream copies them out of the
    packed output first, ``rearrange_mixed_qkv``), 2-D indices and ``num_accepted_tokens``.
    """

    kernel = "gdn"

    def __init__(self, active, captured, state, act, z=True, pools="fresh", tokens=1, dt="head", shape=None):
        super().__init__(pools)
        s = shape or GDN
        H, HV, K, V = s["H"], s["HV"], s["K"], s["V"]
        dev = "cuda"
        self.state_dtype, self.T, self.active = state, tokens, active
        if tokens == 1:
            ntok, self.slots = captured, captured + 1
            self.idx = _indices(active, captured)
            self.num_acc = self.cu = None
        else:
            ntok, self.slots = active * tokens, active * tokens + 1
            self.idx = (torch.randperm(active * tokens, dtype=torch.int32) + 1).view(active, tokens).cuda()
            self.num_acc = torch.randint(1, tokens + 1, (active,), dtype=torch.int32).cuda()
            self.cu = torch.arange(0, ntok + 1, tokens, dtype=torch.int32, device=dev)
        self.mixed = torch.randn(ntok, 2 * H * K + HV * V, device=dev, dtype=act)
        q, k, v = torch.split(self.mixed, [H * K, H * K, HV * V], dim=-1)
        self.q, self.k = (x.reshape(1, ntok, H, K).contiguous() for x in (q, k))
        self.v = v.reshape(1, ntok, HV, V).contiguous()
        self.a = torch.randn(ntok, HV, device=dev, dtype=act)
        self.b = torch.randn(ntok, HV, device=dev, dtype=act)
        self.A_log = torch.log(torch.rand(HV, device=dev) * 15 + 1)  # A in [1, 16), as Qwen3-Next's init
        self.dt_bias = torch.rand(HV, device=dev) - 0.5
        self.scale = K ** -0.5
        self.packed_out = torch.empty(ntok, 1, HV, V, device=dev, dtype=act)
        self.shape = (self.slots, HV, V, K)
        state_bytes = HV * V * K * _esize(state)
        self.pool_bytes = self.slots * state_bytes
        self.nbytes = active * (2 if tokens == 1 else 1 + tokens) * state_bytes
        self.out = None
        if tokens > 1:  # fused_sigmoid_gating_delta_rule_update takes no out, upstream's nor ours
            self.out_bytes = ntok * HV * V * _esize(act)

    def new_pool(self, scale=0.1):
        p = torch.randn(self.shape, device="cuda", dtype=self.state_dtype)
        return p.mul_(scale) if scale != 1.0 else p

    def call(self, impl, pool, bugs=None):
        if self.T == 1:
            args = (self.mixed, self.a, self.b, self.A_log, self.dt_bias, self.scale, pool, self.packed_out,
                    self.idx)
            if impl == "vllm":
                from vllm.third_party.flash_linear_attention.ops.fused_recurrent import (  # type: ignore
                    fused_recurrent_gated_delta_rule_packed_decode as fn,
                )

                fn(*args, use_qk_l2norm_in_kernel=True)
            else:
                from mambalab.kernels.gated_delta_rule_packed import fused_recurrent_gated_delta_rule_packed_decode

                # early_state_load: mambalab's GDN layer makes that promise (the conv before it writes neither the
                # recurrent state nor the indices); here each launch of a timed graph updates its own pool.
                fused_recurrent_gated_delta_rule_packed_decode(*args, True, bugs=bugs, early_state_load=True)
            self.out = self.packed_out
            return self.out
        kw = dict(initial_state=pool, inplace_final_state=True, cu_seqlens=self.cu, ssm_state_indices=self.idx,
                  num_accepted_tokens=self.num_acc, use_qk_l2norm_in_kernel=True)
        if impl == "vllm":
            from vllm.third_party.flash_linear_attention.ops.fused_sigmoid_gating import (  # type: ignore
                fused_sigmoid_gating_delta_rule_update as fn,
            )

            o, _ = fn(A_log=self.A_log, a=self.a, b=self.b, dt_bias=self.dt_bias, q=self.q, k=self.k, v=self.v,
                      **kw)
        else:
            from mambalab.kernels.gated_delta_rule import fused_sigmoid_gating_delta_rule_update

            o, _ = fused_sigmoid_gating_delta_rule_update(self.A_log, self.a[None], self.b[None], self.dt_bias,
                                                          self.q, self.k, self.v, bugs=bugs, early_state_load=True,
                                                          **kw)
        self.out = o
        return o

    def live_out(self):
        o = self.out.reshape(-1, *self.out.shape[-2:])
        return o[: self.active * self.T]

    def live_slots(self):
        return self.idx[: self.active].reshape(-1).long()


class ConvCase(Case):
    """``causal_conv1d_update`` (decode; with ``num_accepted_tokens`` and varlen rows for speculation)."""

    kernel = "conv"

    def __init__(self, active, captured, state, act, z=True, pools="fresh", tokens=1, dt="head", shape=None):
        super().__init__(pools)
        s = shape or CONV
        dim, width = s["dim"], s["width"]
        self.dim = dim
        dev = "cuda"
        self.state_dtype, self.T, self.active = state, tokens, active
        self.state_len = width - 1 + (tokens - 1)
        if tokens == 1:
            ntok, self.slots = captured, captured + 1
            self.idx = _indices(active, captured)
            self.num_acc = self.qsl = None
        else:
            ntok, self.slots = active * tokens, active + 1
            self.idx = _indices(active, active)
            self.num_acc = torch.randint(1, tokens + 1, (active,), dtype=torch.int32).cuda()
            self.qsl = torch.arange(0, ntok + 1, tokens, dtype=torch.int32, device=dev)
        self.x = torch.randn(ntok, dim, device=dev, dtype=act)
        self.w = torch.randn(dim, width, device=dev, dtype=act)
        self.b = torch.randn(dim, device=dev, dtype=act)
        self.out = torch.empty_like(self.x)
        es = _esize(state)
        self.pool_bytes = self.slots * self.state_len * dim * es
        hist = width - 1
        per_req = (hist + (hist - 1 + tokens)) * dim * es if tokens > 1 else 2 * hist * dim * es
        self.nbytes = active * (per_req + 2 * tokens * dim * _esize(act))

    def new_pool(self, scale=0.1):
        from mambalab.kernels.causal_conv1d import make_conv_state

        s = make_conv_state(self.slots, self.dim, self.state_len, self.state_dtype, "cuda")
        s.copy_(torch.randn_like(s) * scale)
        return s

    def call(self, impl, pool, bugs=None):
        kw = dict(activation="silu", conv_state_indices=self.idx, out=self.out)
        if self.T > 1:
            kw.update(num_accepted_tokens=self.num_acc, query_start_loc=self.qsl, max_query_len=self.T)
        if impl == "vllm":
            from vllm.model_executor.layers.mamba.ops.causal_conv1d import causal_conv1d_update as fn  # type: ignore

            return fn(self.x, pool, self.w, self.b, **kw)
        from mambalab.kernels.causal_conv1d import causal_conv1d_update

        return causal_conv1d_update(self.x, pool, self.w, self.b, bugs=bugs, **kw)

    def live_out(self):
        return self.out[: self.active * self.T]

    def live_slots(self):
        return self.idx[: self.active].reshape(-1).long()


CASES = {"ssu": SSUCase, "gdn": GDNCase, "conv": ConvCase}
# relative RMS error allowed between two implementations (kernels.md tolerances, as RMS)
GATE_TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 1e-2}


def _rel_rms(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float(), b.float()
    return float((a - b).pow(2).mean().sqrt() / b.pow(2).mean().sqrt().clamp_min(1e-12))


class poisoned_allocations:
    """Allocations inside come from a private pool of the caching allocator (``torch.cuda.MemPool``) whose first
    ``nbytes`` hold 0xFF bytes (NaN in fp32, bf16 and fp16), freed before use: an output a function allocates
    itself, if it is that pool's first allocation, starts poisoned. :meth:`holds` says whether a tensor lies there.
    """

    def __init__(self, nbytes: int):
        self.nbytes, self.pool, self.lo = nbytes, torch.cuda.MemPool(), 0

    def __enter__(self):
        self._ctx = torch.cuda.use_mem_pool(self.pool)
        self._ctx.__enter__()
        poison = torch.full((self.nbytes,), 0xFF, dtype=torch.uint8, device="cuda")
        self.lo = poison.data_ptr()
        del poison
        return self

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)

    def holds(self, t: torch.Tensor) -> bool:
        return self.lo <= t.data_ptr() and t.data_ptr() + t.numel() * t.element_size() <= self.lo + self.nbytes


def agreement(case: Case, impls: list[str]) -> tuple[bool, str]:
    """Run every implementation once on a copy of the same pool; compare outputs and updated slots.

    Outputs are poisoned (NaN) first, so an element an implementation does not write fails the gate: the case's
    output buffer, or where the implementation allocates its own (``case.out_bytes``), the memory that allocation
    gets (:class:`poisoned_allocations`; the gate fails if the output does not lie there). The untouched slots (the
    null block included) must stay bit-identical to the input pool.
    """
    base = case.make_pools(1)[0]
    results, msgs, ok, poisons = {}, [], True, []
    for impl in impls:
        pool = base.clone()
        bugs = None if impl != "mambalab" else BugConfig.fixed()
        if case.out_bytes:
            poisons.append(poisoned_allocations(case.out_bytes))  # kept: a pool is not dropped inside another's use
            with poisons[-1]:
                case.call(impl, pool, bugs)
            torch.cuda.synchronize()
            if not poisons[-1].holds(case.out):
                ok = False
                msgs.append(f"{impl}: its output is not in the poisoned allocation")
        else:
            (case.packed_out if case.kernel == "gdn" else case.out).fill_(float("nan"))  # all must be written
            case.call(impl, pool, bugs)
            torch.cuda.synchronize()
        results[impl] = (case.live_out().clone(), pool)
    live = case.live_slots()
    keep = torch.ones(base.shape[0], dtype=torch.bool, device=base.device)
    keep[live] = False
    ref_out, ref_pool = results[impls[0]]
    for impl in impls:
        out, pool = results[impl]
        if not torch.equal(pool[keep], base[keep]):
            ok = False
            msgs.append(f"{impl}: untouched slots changed")
        if not bool(torch.isfinite(out.float()).all()):
            ok = False
            msgs.append(f"{impl}: non-finite outputs")
        if impl == impls[0]:
            continue
        e_out = _rel_rms(out, ref_out)
        e_state = _rel_rms(pool[live], ref_pool[live])
        tol_out, tol_state = GATE_TOL[out.dtype], GATE_TOL[pool.dtype]
        if case.kernel == "conv":
            tol_state = 0.0  # the conv state is a copy of inputs: exact
        if e_out > tol_out or e_state > tol_state:
            ok = False
        msgs.append(f"{impl} vs {impls[0]}: out {e_out:.1e}, state {e_state:.1e}")
    if poisons:
        case.out = None  # the last output's memory back to its pool, then the pools released
    del results, poisons
    return ok, "; ".join(msgs)
