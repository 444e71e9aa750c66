"""Issue 14, call 189: why the SSU's small batches trail vLLM after a torch kernel that does not trigger PDL ("after
torch"), and alone under Nsight Compute (call 188: bf16 batch 8 12.19 against vLLM's 10.62 us), while they lead in
the bench, where each launch follows another of its own. Suspects: the L2 hint issued before PDL's wait
(``PREFETCH_STATE``, bf16) and the state read before the wait (``EARLY_STATE_LOAD``, batch <= 4), which pay only
when they overlap the kernel before. Variants (module switches of ``mamba_ssm``): "base"; "nohint" (no L2 hint);
"noearly" (no early state load); "neither". SSU, ``A``/``dt`` per head, one token, ``z=None``: bf16 at 1 / 2 / 4 / 8
/ 9, fp32 state with bf16 activations at 1 / 2 / 4; in both harnesses (the bench's; after a torch kernel), then
layer pairs (a torch kernel, the conv with its trigger, the SSU; the torch kernel subtracted). Tree 3fd9d22.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call189-ssu-alone.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

import ab_sweep  # noqa: E402
from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ssu  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
HINT = dict(ssu.PREFETCH_STATE)


def setv(v):
    ssu.PREFETCH_STATE.clear()
    if v in ("base", "noearly"):
        ssu.PREFETCH_STATE.update(HINT)
    ssu.EARLY_STATE_LOAD = v in ("base", "nohint")


VARIANTS = ("base", "nohint", "noearly", "neither")
CASES = [("bf16", b) for b in (1, 2, 4, 8, 9)] + [("fp32", b) for b in (1, 2, 4)]
PARTS = parts("ssu-nb,ssu,pairs")
SWEEP = Sweep("ab-ssu-alone")
for part in [p for p in PARTS if p != "pairs"]:
    ab_sweep.NEIGHBOUR[0] = part.endswith("-nb")
    SWEEP.run(part, CASES, {v: i for i, v in enumerate(VARIANTS)}, setv,
              lambda k: SSUCase(k[1], k[1], D[k[0]], D["bf16"], False, "cloned", 1))
if "pairs" in PARTS:
    for state, shapes in (("bf16", ((1, 1), (8, 8))), ("fp32", ((1, 1), (4, 4)))):
        pair_sweep(f"conv+ssu {state}", shapes,
                   lambda a, c, st=state: (ConvCase(a, c, D["bf16"], D["bf16"], False, "cloned", 1),
                                           SSUCase(a, c, D[st], D["bf16"], False, "cloned", 1)),
                   VARIANTS, setv, f"ssu-alone-pairs-{state}.json")
print("all done", flush=True)
