"""Issue 14, call 247 (H200): the SSU's CUDA kernel with its CTA's rows in two or four bulk copies, all before the
wait (``issue14-call247-ssu-tma-pieces.cu``: the shipped source plus ``_p2`` / ``_p4`` entries), after call 246 found
two copies in the 32-row CTA 1-2% faster at 8-9 requests.

- Forced, against the shipped entries forced and the Triton kernel ("base"): bf16 state and activations at 1-6
  (the rule's 16-row range: "r16", "r16p2", "r16p4") and 7-12 (its 32-row range: "r32", "r32p2", "r32p4"); with
  ``z`` at 1 and 8-9; the fp32 state at 1 (bf16 and fp32 activations, and with ``z``).
- Through the rule, as a layer runs it (the conv, then the SSU, after a torch kernel), and in the bench and after a
  torch kernel at the rule's rows: "rule" (shipped), "rp32" (its 32-row launches on two copies), "rp" (every launch
  on two copies).

Before timing, each new entry's outputs and slots against the torch reference (null rows among the live ones,
outputs poisoned); the agreement gate on each variant.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call247-ssu-tma-pieces.py
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
TYPES = [(s, a) for s in (D["bf16"], D["fp32"]) for a in (D["bf16"], D["fp32"])]
tma.ENTRIES = tma.ENTRIES + tuple(tma.entry(s, a, r, z) + f"_p{p}" for s, a in TYPES for r in (16, 32)
                                  for z in (False, True) for p in (2, 4))
SHIPPED, _entry = tma.RULES, tma.entry
SUF: dict[int, str] = {}
tma.entry = lambda s, a, rows, z: _entry(s, a, rows, z) + SUF.get(rows, "")
FORCED = {f"r{r}{p}": (r, {r: f"_{p}"} if p else {}) for r in (16, 32) for p in ("", "p2", "p4")}
RULED = {"rule": {}, "rp32": {32: "_p2"}, "rp": {16: "_p2", 32: "_p2"}}


def setv(v):
    global SUF
    if v == "base":
        tma.FORCE, tma.RULES, SUF = None, {}, {}
    elif v in FORCED:
        (tma.FORCE, SUF), tma.RULES = FORCED[v], {}
    else:
        tma.FORCE, tma.RULES, SUF = None, SHIPPED, RULED[v]


for v in [v for v in FORCED if "p" in v]:
    for st, act in TYPES:
        for z in (False, True):
            for batch, live in ((1, 1), (9, 7)):
                setv(v)
                case = make_case(700 + batch, rows=batch, nheads=128, dim=64, dstate=128, ngroups=8, tied=True,
                                 slots=batch + 4, dtypes=(st, act), has_z=z)
                idx = random_slot_indices(batch, batch + 4, num_null_rows=batch - live, generator=gen(701)).cuda()
                state, s_ref = case.state.clone(), case.state.clone()
                out, o_ref = poison_(torch.empty_like(case.kwargs["x"])), torch.empty_like(case.kwargs["x"])
                selective_state_update(state, out=out, state_batch_indices=idx, early_state_load=True, **case.kwargs)
                selective_state_update_ref(s_ref, out=o_ref, state_batch_indices=idx, **case.kwargs)
                d_out = (out.float() - o_ref.float()).abs().max().item()
                d_st = (state.float() - s_ref.float()).abs().max().item()
                print(f"check {v} state {st} act {act} z={int(z)} batch {batch}: out {d_out:.2e} state {d_st:.2e}",
                      flush=True)
setv("base")


def ssu(st, act, z=False):
    return lambda k: SSUCase(k[0], k[1], D[st], D[act], z, "cloned", 1)


R16, R32, RULE = ("base", "r16", "r16p2", "r16p4"), ("base", "r32", "r32p2", "r32p4"), ("base", *RULED)
sw = Sweep("ab-ssu-tma-pieces")
for part in parts("bf16,bf16-nb,rule,rule-nb,pairs"):
    nb = "-nb" if part.endswith("-nb") else ""
    if part.startswith("bf16"):
        sw.run_parts([f"lo{nb}"], [(n, n) for n in (1, 2, 4, 5, 6)], R16, setv, ssu("bf16", "bf16"))
        sw.run_parts([f"hi{nb}"], [(n, n) for n in (7, 8, 9, 10, 12)], R32, setv, ssu("bf16", "bf16"))
        sw.run_parts([f"z-lo{nb}"], [(1, 1)], R16, setv, ssu("bf16", "bf16", True))
        sw.run_parts([f"z-hi{nb}"], [(8, 8), (9, 9)], R32, setv, ssu("bf16", "bf16", True))
        sw.run_parts([f"fp32{nb}"], [(1, 1)], R16, setv, ssu("fp32", "bf16"))
        sw.run_parts([f"ff{nb}"], [(1, 1)], R16, setv, ssu("fp32", "fp32"))
        sw.run_parts([f"zf{nb}"], [(1, 1)], R16, setv, ssu("fp32", "bf16", True))
    elif part.startswith("rule"):
        sw.run_parts([f"rule-bf16{nb}"], [(n, n) for n in (1, 2, 4, 8, 9, 12)] + [(9, 16)], RULE, setv,
                     ssu("bf16", "bf16"))
        sw.run_parts([f"rule-z{nb}"], [(1, 1), (8, 8)], RULE, setv, ssu("bf16", "bf16", True))
        sw.run_parts([f"rule-fp32{nb}"], [(1, 1)], RULE, setv, ssu("fp32", "bf16"))
    elif part == "pairs":
        for st, shapes in ((D["bf16"], ((1, 1), (4, 4), (8, 8), (9, 9), (12, 12))), (D["fp32"], ((1, 1),))):
            tag = "b" if st == D["bf16"] else "f"
            pair_sweep(f"conv+ssu {tag}b", shapes,
                       lambda a, c, st=st: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                                            SSUCase(a, c, st, D["bf16"], False, "cloned", 1)),
                       RULE, setv, f"ssu-tma-pieces-pairs-{tag}.json")
print("all done", flush=True)
