"""Issue 14, call 229 (H200): the SSU with the token floor's fastest shape (call 228): under the early state load, the
odd row blocks read their state after PDL's wait (``mamba_ssm.EARLY_HALF_STATE``), so state bytes move while the
even blocks wait on their token. At the rows the recording misses where the kernel could take it: bf16 one token at
8 / 9 / 16 (the H200's rule reads nothing early there: ``small_early=False``, call 197), fp32 one token at 4-16, fp32
speculative at 8.

Variants: "base" the tree; "early" the state read before the wait up to 16 x 128 request x heads (the H200's bf16 rule
with ``small_early``); "half" that with the odd row blocks after the wait. Bench, after a torch kernel ("-nb"), and
as a layer runs it (the conv, then the SSU).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site MAMBALAB_DEVICE=cuda OUT=$OUT python3 docs/results/issue14-call229-ssu-half-early.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import ALL, Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ssu  # noqa: E402
from mambalab.kernels import mamba_ssm_devices as dev  # noqa: E402

D = bench.DTYPES
NAME = torch.cuda.get_device_name()
print("device", NAME, flush=True)
RULE = dev.SSU_DEVICE_RULES[NAME][2]
BASE = (ssu.EARLY_STATE_MAX_REQUEST_HEADS, ssu.EARLY_STATE_MAX_REQUEST_HEADS_MULTI_TOKEN)


def setv(v):
    on = v != "base"
    dev.SSU_DEVICE_RULES[NAME][2] = RULE._replace(small_early=True) if on else RULE
    ssu.EARLY_STATE_MAX_REQUEST_HEADS = 16 * 128 if on else BASE[0]
    ssu.EARLY_STATE_MAX_REQUEST_HEADS_MULTI_TOKEN = 16 * 128 if on else BASE[1]
    ssu.EARLY_HALF_STATE = {2: ALL, 4: ALL} if v == "half" else {}


VARIANTS = ("base", "early", "half")
# (state, act, z, pools, T, active, captured)
ROWS = [("bf16", "bf16", False, "cloned", 1, 8, 8), ("bf16", "bf16", False, "cloned", 1, 9, 9),
        ("bf16", "bf16", False, "cloned", 1, 16, 16), ("bf16", "bf16", False, "cloned", 1, 9, 16),
        ("bf16", "bf16", True, "cloned", 1, 8, 8), ("bf16", "bf16", False, "cloned", 1, 4, 4),
        ("fp32", "bf16", False, "cloned", 1, 4, 4), ("fp32", "fp32", False, "cloned", 1, 4, 4),
        ("fp32", "bf16", False, "cloned", 1, 8, 8), ("fp32", "bf16", False, "cloned", 1, 9, 16),
        ("fp32", "bf16", False, "cloned", 2, 8, 8), ("fp32", "bf16", False, "cloned", 3, 8, 8),
        ("fp32", "bf16", False, "cloned", 4, 8, 8)]


def make(k):
    state, act, z, pools, T, a, c = k
    return SSUCase(a, c, D[state], D[act], z, pools, T)


PARTS = parts("ssu,ssu-nb,pairs")
Sweep("ab-half").run_parts(PARTS, ROWS, VARIANTS, setv, make)
if "pairs" in PARTS:
    for st in ("bf16", "fp32"):
        shapes = ((8, 8), (9, 9), (16, 16)) if st == "bf16" else ((4, 4), (8, 8), (9, 16))
        pair_sweep(f"conv+ssu {st}", shapes,
                   lambda a, c, st=st: (ConvCase(a, c, D["bf16"], D["bf16"], False, "cloned", 1),
                                        SSUCase(a, c, D[st], D["bf16"], False, "cloned", 1)),
                   VARIANTS, setv, f"half-pairs-{st}.json")
print("all done", flush=True)
