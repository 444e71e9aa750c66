"""Issue 14, call 140: which GDN kernel vLLM 0.33 runs in decode, and the small batches after a non-triggering kernel.

Part "gdn": vLLM 0.33's Qwen3-Next layer (``qwen_gdn_linear_attn.py``, ``_forward_core_decode_non_spec``) runs a
decode-only batch through ``fused_recurrent_gated_delta_rule_packed_decode`` (``VLLM_ENABLE_FLA_PACKED_RECURRENT_DECODE``
on by default): q/k/v read from the conv's packed output, the gates computed in the kernel. The bench's vLLM column is
``fused_recurrent_gated_delta_rule`` with the gates given. Both timed here beside mambalab's kernel with the gates given
(as the bench) and with them computed in the kernel (``fused_sigmoid_gating_delta_rule_update``), q/k/v strided views
of one packed tensor for every implementation; in the bench's harness and after a torch kernel that does not trigger
PDL (``ab_sweep.NEIGHBOUR``).

Parts "ssu-nb" / "gdn-nb": after that torch kernel, the SSU's and the GDN's small-batch launches in other tiles and
without PDL (``nopdl``) or the early loads (``noearly``); "ssu" / "gdn": the same variants in the bench's harness.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call140-gdn-packed.py
"""
import json
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import ab_sweep  # noqa: E402
from ab_sweep import Sweep, parts, timed  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDN, GDNCase, SSUCase, _rel_rms  # noqa: E402
from mambalab.kernels import common  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-packed")
PDL, LAUNCH = common.use_pdl, gdn.launch_config


class Packed(GDNCase):
    """One token a sequence; q/k/v views of one packed [N, 2 H K + HV V] tensor, a/b raw, the gates computed."""

    def __init__(self, active, captured, state):
        super().__init__(active, captured, state, D["bf16"], True, "cloned", 1)
        H, HV, K, V = GDN["H"], GDN["HV"], GDN["K"], GDN["V"]
        n = captured
        self.mixed = torch.cat([self.q.reshape(n, -1), self.k.reshape(n, -1), self.v.reshape(n, -1)], -1)
        self.q = self.mixed[:, : H * K].view(1, n, H, K)
        self.k = self.mixed[:, H * K: 2 * H * K].view(1, n, H, K)
        self.v = self.mixed[:, 2 * H * K:].view(1, n, HV, V)
        self.a = torch.randn(n, HV, device="cuda", dtype=D["bf16"])
        self.b = torch.randn(n, HV, device="cuda", dtype=D["bf16"])
        self.A_log = torch.log(torch.rand(HV, device="cuda") * 15 + 1)
        self.dt_bias = torch.rand(HV, device="cuda") - 1.0
        self.g = (-self.A_log.exp() * F.softplus(self.a.float() + self.dt_bias))[None]
        self.beta = torch.sigmoid(self.b.float())[None]
        self.out_p = torch.empty(n, 1, HV, V, device="cuda", dtype=D["bf16"])

    def call(self, impl, pool, bugs=None):
        if impl == "vllm-packed":
            from vllm.third_party.flash_linear_attention.ops.fused_recurrent import (  # type: ignore
                fused_recurrent_gated_delta_rule_packed_decode as fn)
            fn(self.mixed, self.a, self.b, self.A_log, self.dt_bias, GDN["K"] ** -0.5, pool, self.out_p,
               self.idx, use_qk_l2norm_in_kernel=True)
            self.out = self.out_p.view(1, -1, GDN["HV"], GDN["V"])
            return self.out
        if impl == "mambalab-gating":
            o, _ = gdn.fused_sigmoid_gating_delta_rule_update(
                self.A_log, self.a[None], self.b[None], self.dt_bias, self.q, self.k, self.v, initial_state=pool,
                cu_seqlens=self.cu, ssm_state_indices=self.idx, use_qk_l2norm_in_kernel=True, bugs=ab_sweep.FIX)
            self.out = o
            return o
        return super().call(impl, pool, bugs)


IMPLS = ("vllm", "vllm-packed", "mambalab", "mambalab-gating")


def packed_part(part):
    rows = []
    for state in ("bf16", "fp32"):
        for active, captured in ((1, 1), (2, 2), (4, 4), (8, 8), (9, 16), (16, 16), (32, 32), (57, 64), (64, 64),
                                 (128, 128), (256, 256), (512, 512)):
            case = Packed(active, captured, D[state])
            base = case.make_pools(1)[0]
            res = {}
            for impl in IMPLS:
                pool = base.clone()
                case.call(impl, pool, ab_sweep.FIX if impl.startswith("mambalab") else None)
                torch.cuda.synchronize()
                res[impl] = (case.live_out().clone(), pool)
            live = case.live_slots()
            err = {i: (_rel_rms(res[i][0], res["vllm-packed"][0]), _rel_rms(res[i][1][live], res["vllm-packed"][1][live]))
                   for i in IMPLS}
            del res, base
            us = {i: [] for i in IMPLS}
            for p in range(2):
                for impl in (IMPLS if p == 0 else IMPLS[::-1]):
                    us[impl].append(timed(case, impl))
            m = {i: min(x) for i, x in us.items()}
            pct = {i: 100 * case.nbytes / m[i] / 1e3 / SWEEP.copy for i in IMPLS}
            print(f"{part} {state} {active}->{captured}: " + " ".join(
                f"{i} {m[i]:7.2f} ({pct[i]:4.1f}%)" for i in IMPLS) +
                f" | vllm/packed {m['vllm'] / m['vllm-packed']:.3f} ours/packed {m['vllm-packed'] / m['mambalab']:.3f}x"
                f" gating {m['vllm-packed'] / m['mambalab-gating']:.3f}x | err " +
                " ".join(f"{i} {e[0]:.1e}/{e[1]:.1e}" for i, e in err.items()), flush=True)
            rows.append(dict(state=state, active=active, captured=captured, us=us, err=err))
            with open(f"{SWEEP.out}/ab-packed-{part}.json", "w") as f:
                json.dump(dict(copy_gbps=SWEEP.copy, rows=rows), f, indent=0)
            del case
            torch.cuda.empty_cache()


def set_ssu(v):
    common.use_pdl = ms.use_pdl = gdn.use_pdl = PDL if v != "nopdl" else (lambda device: False)
    ms.EARLY_STATE_LOAD = v != "noearly"
    ms._override = None if v in ("base", "nopdl", "noearly") else ms.LaunchConfig(int(v[1:3]), int(v[-1]))


SSU_V = {k: 0 for k in ("base", "nopdl", "noearly", "m04w1", "m08w1", "m16w1", "m04w2", "m08w2", "m16w2", "m32w2")}


def set_gdn(v):
    common.use_pdl = ms.use_pdl = gdn.use_pdl = PDL if v != "nopdl" else (lambda device: False)
    gdn.EARLY_STATE_LOAD = v != "noearly"
    if v.startswith("bv"):
        bv = int(v[2:])
        gdn.launch_config = lambda *a, **kw: (128, bv, 1)
    else:
        gdn.launch_config = LAUNCH


GDN_V = {k: 0 for k in ("base", "nopdl", "noearly", "bv4", "bv8", "bv16", "bv32")}
STREAM = dict(gdn.STREAM)


def set_gdn_stream(v):
    set_gdn(v)
    gdn.STREAM = {} if v.startswith("bv") else STREAM  # a forced BV runs the general kernel


for part in parts("gdn-packed-nb,gdn-packed,ssu-nb,gdn-nb,ssu,gdn"):
    ab_sweep.NEIGHBOUR[0] = part.endswith("-nb")
    if part.startswith("gdn-packed"):
        packed_part(part)
    elif part.startswith("ssu"):
        SWEEP.run(part, [(s, b) for s in ("bf16", "fp32") for b in (1, 2, 4, 8)], SSU_V, set_ssu,
                  lambda k: SSUCase(k[1], k[1], D[k[0]], D["bf16"], False, "cloned", 1, "head"))
    else:
        SWEEP.run(part, [("bf16", b) for b in (1, 2, 4, 8, 16)] + [("fp32", b) for b in (1, 2, 4)], GDN_V,
                  set_gdn_stream, lambda k: GDNCase(k[1], k[1], D[k[0]], D["bf16"], True, "cloned", 1))
print("all done", flush=True)
