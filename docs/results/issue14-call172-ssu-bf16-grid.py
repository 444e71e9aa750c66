"""Issue 14, call 172: the SSU's one-token launch with a bf16 state and ``A``/``dt`` per head at batch 4-256, where
call 163 (H200) and call 171 (H100) read 1.06-1.09x at 8 / 9 (1.1x asked) and the copy floor (call 166, H100) leaves
8-11%. Variants, beside the rule ("base": requests before heads in the grid, 16 rows on one warp, the L2 hint before
PDL's wait, no early state load past batch 4):

* "hf": the grid walks a slot's heads together (``HEADS_FIRST_TIED_16BIT_MAX``), the requests zigzagged as for the
  fp32 state (call 126 measured the zigzag only there; before it, heads first lost the padded 9 -> 16, calls 79-80);
* "e": the state read before PDL's wait at every batch (``EARLY_STATE_MAX_REQUEST_HEADS``; call 123: 1-4% slower at
  8-9 alone);
* "hfe": both; "e32w4" / "hfe32w4": with the copy floor's fastest shape at 8 (8 KiB a program on 4 warps:
  ``launch_config_override`` 32 rows, 4 warps).

In the bench's harness and after a torch kernel that does not trigger PDL ("-nb").

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call172-ssu-bf16-grid.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

import ab_sweep  # noqa: E402
from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-grid")
EARLY = ms.EARLY_STATE_MAX_REQUEST_HEADS
VARIANTS = {k: 0 for k in ("base", "hf", "e", "hfe", "e32w4", "hfe32w4")}


def set_ssu(v):
    ms.HEADS_FIRST_TIED_16BIT_MAX = 1 << 30 if v.startswith("hf") else 0
    ms.EARLY_STATE_MAX_REQUEST_HEADS = 1 << 30 if "e" in v.removeprefix("hf") else EARLY
    ms._override = ms.LaunchConfig(32, 4) if v.endswith("32w4") else None


CASES = [(a, c, z, pools) for a, c in ((4, 4), (8, 8), (9, 9), (9, 16), (16, 16), (32, 32), (64, 64), (256, 256))
         for z, pools in ((False, "cloned"),)] + [(8, 8, True, "cloned"), (8, 8, False, "fresh")]
for part in parts("ssu,ssu-nb"):
    ab_sweep.NEIGHBOUR[0] = part.endswith("-nb")
    SWEEP.run(part, CASES, VARIANTS, set_ssu,
              lambda k: SSUCase(k[0], k[1], D["bf16"], D["bf16"], k[2], k[3], 1, "head"))
print("all done", flush=True)
