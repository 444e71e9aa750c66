"""Issue 14, call 246 (H200): three more forms of the SSU's CUDA kernel (``issue14-call246-ssu-tma-forms.cu``: the
shipped source plus ``_w2``, ``_p2`` and ``_lean`` entries), forced, against the shipped 16- and 32-row entries forced
("r16", "r32") and the Triton kernel ("base"):

- at 8-16 requests, bf16 state and activations, with and without ``z``: "r32w2" (32-row CTAs on two warps of 16 rows)
  and "r32p2" (one warp, its 32 rows in two bulk copies, both before the wait), the plan's CTA shapes between the
  16- and 32-row ones;
- at 1-2 requests and 9, every state / activation dtype the rule takes: "r16lean" / "r32lean", the first committed
  form (call 239 timed it slower in the bench and faster after a torch kernel at batch 1), parts "s-*"; the
  after-torch rows a second time ("s2-*-nb"), to see whether call 239's batch-1 figure repeats.

Before timing, each new form's outputs and slots against the torch reference (null rows among the live ones,
outputs poisoned). Bench, after a torch kernel ("-nb"); the agreement gate on each variant.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call246-ssu-tma-forms.py
    # one form alone, for Nsight Compute (--kernel-name regex:ssu_tma --launch-skip 1 --launch-count 1):
    python3 docs/results/issue14-call246-ssu-tma-forms.py ncu r16lean bf16 1
"""
import sys
from pathlib import Path

sys.path[:0] = ["lib", "scripts", "tests"]
import torch  # noqa: E402

from ab_sweep import Sweep, _calls, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm_tma as tma  # noqa: E402

D = bench.DTYPES
tma.SOURCE = Path(__file__).resolve().with_suffix(".cu")
TYPES = [(s, a) for s in (D["bf16"], D["fp32"]) for a in (D["bf16"], D["fp32"])]
tma.ENTRIES = (tma.ENTRIES + tuple(tma.entry(s, a, r, z) + "_lean" for s, a in TYPES for r in (16, 32)
                                   for z in (False, True))
               + tuple(f"ssu_tma_bb_r32_z{z}_{f}" for f in ("w2", "p2") for z in (0, 1)))
FORMS = {"base": (None, ""), "r16": (16, ""), "r32": (32, ""), "r32w2": (32, "_w2"), "r32p2": (32, "_p2"),
         "r16lean": (16, "_lean"), "r32lean": (32, "_lean")}
SUFFIX, _entry = [""], tma.entry
tma.entry = lambda *a: _entry(*a) + SUFFIX[0]
_launch = tma._get_driver().launch
tma._get_driver().launch = lambda fn, grid, block, *a, **k: _launch(fn, grid, 64 if SUFFIX[0] == "_w2" else block,
                                                                    *a, **k)


def setv(v):
    tma.FORCE, SUFFIX[0] = FORMS[v]
    tma.RULES = {}


def ssu(st, act, z=False):
    return lambda k: SSUCase(k[0], k[1], D[st], D[act], z, "cloned", 1)


if sys.argv[1:2] == ["ncu"]:
    _, _, v, st, batch = sys.argv
    setv(v)
    calls = _calls(ssu(st, "bf16")((int(batch), int(batch))), "mambalab")
    for c in calls[:4]:
        c()
    torch.cuda.synchronize()
    sys.exit(0)

from mambalab.kernels.mamba_ssm import selective_state_update  # noqa: E402
from mambalab.kernels.mamba_ssm_ref import selective_state_update_ref  # noqa: E402
from mambalab.kernels.testing import poison_, random_slot_indices  # noqa: E402
from test_kernel_selective_state_update import gen, make_case  # noqa: E402

print("device", torch.cuda.get_device_name(), flush=True)
CHECKS = [(v, s, a, z) for v in ("r32w2", "r32p2") for s, a in [(D["bf16"], D["bf16"])] for z in (False, True)]
CHECKS += [(v, s, a, z) for v in ("r16lean", "r32lean") for s, a in TYPES for z in (False, True)]
for v, st, act, z in CHECKS:
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
        print(f"check {v} state {str(st)[-7:]} act {str(act)[-7:]} z={int(z)} batch {batch}: out {d_out:.2e}"
              f" state {d_st:.2e}", flush=True)
setv("base")

SHAPES = ("base", "r16", "r32", "r32w2", "r32p2")
LEAN = ("base", "r16", "r16lean", "r32", "r32lean")
sw = Sweep("ab-ssu-tma-forms")
for part in parts("bf16,bf16-nb,z,z-nb,small,small-nb,again-nb"):
    kind = part.split("-")[0]
    if kind == "bf16":
        sw.run_parts([part], [(8, 8), (9, 9), (12, 12), (13, 13), (15, 15), (16, 16), (9, 16)], SHAPES, setv,
                     ssu("bf16", "bf16"))
    elif kind == "z":
        sw.run_parts([part], [(8, 8), (9, 9)], SHAPES, setv, ssu("bf16", "bf16", True))
    else:  # "small": the lean form at 1-2 and 9; "again": its after-torch rows a second time
        tag = ("s-" if kind == "small" else "s2-") + "%s" + ("-nb" if part.endswith("-nb") else "")
        sw.run_parts([tag % "bf16"], [(1, 1), (2, 2), (9, 9)], LEAN, setv, ssu("bf16", "bf16"))
        sw.run_parts([tag % "z"], [(1, 1)], LEAN, setv, ssu("bf16", "bf16", True))
        sw.run_parts([tag % "fp32"], [(1, 1), (2, 2)], LEAN, setv, ssu("fp32", "bf16"))
        sw.run_parts([tag % "ff"], [(1, 1)], LEAN, setv, ssu("fp32", "fp32"))
print("all done", flush=True)
