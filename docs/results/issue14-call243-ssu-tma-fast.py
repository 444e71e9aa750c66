"""Issue 14, call 243 (H200): the SSU's CUDA kernel with its softplus, exp(A dt) and gate on the approximate exp / log
(``issue14-call243-ssu-tma-fast.cu``: the shipped source plus ``_fast`` entries), against the shipped entries ("rule")
and the Triton kernel ("base": the rule off), the rule's rows; before timing, each form's outputs and slots against
the torch reference (fp32 state and activations, bf16, with ``z``; outputs poisoned). Bench, after a torch kernel
("-nb"), and as a layer runs it (the conv, then the SSU); the agreement gate on each.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call243-ssu-tma-fast.py
"""
import sys
from pathlib import Path

sys.path[:0] = ["lib", "scripts", "tests"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm_tma as tma  # noqa: E402
from mambalab.kernels.mamba_ssm import selective_state_update  # noqa: E402
from mambalab.kernels.mamba_ssm_ref import selective_state_update_ref  # noqa: E402
from mambalab.kernels.testing import poison_, random_slot_indices  # noqa: E402
from test_kernel_selective_state_update import gen, make_case  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
tma.SOURCE = Path(__file__).resolve().with_suffix(".cu")
tma.ENTRIES = tma.ENTRIES + tuple(e + "_fast" for e in tma.ENTRIES)
SHIPPED, _entry = tma.RULES, tma.entry
MODE = ["rule"]
tma.entry = lambda *a: _entry(*a) + ("_fast" if MODE[0] == "fast" else "")


def setv(v):
    MODE[0] = v
    tma.RULES = {} if v == "base" else SHIPPED


for mode in ("rule", "fast"):
    for st, act, z in ((D["fp32"], D["fp32"], False), (D["fp32"], D["bf16"], True), (D["bf16"], D["bf16"], True)):
        for batch, live in ((1, 1), (9, 7)):
            setv(mode)
            tma.FORCE = 16
            case = make_case(700 + batch, rows=batch, nheads=128, dim=64, dstate=128, ngroups=8, tied=True,
                             slots=batch + 4, dtypes=(st, act), has_z=z)
            idx = random_slot_indices(batch, batch + 4, num_null_rows=batch - live, generator=gen(701)).cuda()
            state, s_ref = case.state.clone(), case.state.clone()
            out, o_ref = poison_(torch.empty_like(case.kwargs["x"])), torch.empty_like(case.kwargs["x"])
            selective_state_update(state, out=out, state_batch_indices=idx, early_state_load=True, **case.kwargs)
            selective_state_update_ref(s_ref, out=o_ref, state_batch_indices=idx, **case.kwargs)
            tma.FORCE = None
            d_out = (out.float() - o_ref.float()).abs().max().item()
            d_st = (state.float() - s_ref.float()).abs().max().item()
            print(f"check {mode} state {str(st)[-7:]} act {str(act)[-7:]} z={int(z)} batch {batch}: out {d_out:.2e}"
                  f" state {d_st:.2e}", flush=True)

VARIANTS = ("base", "rule", "fast")
PARTS = parts("bf16,bf16-nb,fp32,fp32-nb,pairs")
sw = Sweep("ab-ssu-tma-fast")
for part in PARTS:
    kind = part.removesuffix("-nb")
    if kind == "bf16":
        sw.run_parts([part], [(n, n) for n in (1, 2, 4, 5, 8, 9, 12)], VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["bf16"], D["bf16"], False, "cloned", 1))
        sw.run_parts([part.replace("bf16", "z")], [(1, 1), (8, 8), (9, 9)], VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["bf16"], D["bf16"], True, "cloned", 1))
    elif kind == "fp32":
        sw.run_parts([part], [(1, 1)], VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["fp32"], D["bf16"], False, "cloned", 1))
        sw.run_parts([part.replace("fp32", "ff")], [(1, 1)], VARIANTS, setv,
                     lambda k: SSUCase(k[0], k[1], D["fp32"], D["fp32"], False, "cloned", 1))
if "pairs" in PARTS:
    pair_sweep("conv+ssu bb", ((1, 1), (8, 8), (9, 9)),
               lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                             SSUCase(a, c, D["bf16"], D["bf16"], False, "cloned", 1)),
               VARIANTS, setv, "ssu-tma-fast-pairs.json")
print("all done", flush=True)
