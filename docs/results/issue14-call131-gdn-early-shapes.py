"""Issue 14, call 131: the GDN streaming kernel's early blocks (``gated_delta_rule.STREAM_EARLY_STATE``, calls
129-130) for an fp32 state, where call 130 read 8 / 16 / 32 +3-6% but the padded 9 -> 16 11% slower: with the
sequences zigzagged ("pdl-zz", ``ZIGZAG_STREAM``; padded rows not a tail) or zigzagged alone ("zz"), against the
rule ("base", no early blocks). And for a bf16 state at 57 -> 64 / 64 / 128 (below 88% of copy), the early blocks
in other shapes: 8 x 2 rows ("pdl-8x2", 16 rows a program, fewer registers) and 32 x 2 on 2 warps ("pdl-32x2w2").

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call131-gdn-early-shapes.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import ALL, Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-gdn-early-shapes")
STREAM, CONFIG, WARPS = dict(gdn.STREAM), gdn.launch_config, [0]
gdn.launch_config = lambda *a, **k: (*CONFIG(*a, **k)[:2], WARPS[0]) if WARPS[0] else CONFIG(*a, **k)
todo = parts("fp32,bf16")


def setv(v):
    gdn.STREAM_EARLY_STATE = {2: (*ALL, False), 4: (*ALL, False)} if v.startswith("pdl") else {}
    gdn.ZIGZAG_STREAM = v.endswith("zz")
    shape = {"pdl-8x2": (8, 2, 2), "pdl-32x2w2": (32, 2, 2)}.get(v)
    gdn.STREAM = STREAM if shape is None else {**STREAM, 2: (*shape, 16, 1 << 30)}
    WARPS[0] = 2 if v.endswith("w2") else 0


if "fp32" in todo:
    cases = [("fp32", a, c) for a, c in ((8, 8), (9, 16), (16, 16), (32, 32))] + [("bf16", 9, 16)]
    SWEEP.run("fp32", cases, {"base": 0, "pdl": 1, "zz": 2, "pdl-zz": 3}, setv,
              lambda k: GDNCase(k[1], k[2], D[k[0]], D["bf16"], True, "cloned", 1))
if "bf16" in todo:
    cases = [("bf16", a, c) for a, c in ((57, 64), (64, 64), (128, 128))]
    SWEEP.run("bf16", cases, {"base": 0, "pdl": 1, "pdl-8x2": 2, "pdl-32x2w2": 3}, setv,
              lambda k: GDNCase(k[1], k[2], D[k[0]], D["bf16"], True, "cloned", 1))
