"""Issue 14, call 173: the SSU's H100 rule (``mamba_ssm_devices``, from call 172's A/B) confirmed at more batches, its
parts apart, on whichever card runs this (the rule's table is set under that card's name). One token a request, bf16
state and activations, ``A``/``dt`` per head; variants:

* "base": no rule (the H200's table: requests before heads, 16 rows on one warp, the early state load to batch 4);
* "hf": the heads-first grid with the zigzag at every batch, nothing else;
* "hfe16": and up to 8 x 128 request x heads the state read before PDL's wait, the table's 16 rows on one warp;
* "rule": the committed H100 rule (and up to 8 x 128 request x heads 32 rows on 4 warps).

In the bench's harness and after a torch kernel that does not trigger PDL ("-nb").

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call173-ssu-bf16-rule.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

import ab_sweep  # noqa: E402
from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm_devices as devices  # noqa: E402
from mambalab.kernels.mamba_ssm_devices import SSUDeviceRule  # noqa: E402

D = bench.DTYPES
NAME = torch.cuda.get_device_name()
print("device", NAME, flush=True)
SWEEP = Sweep("ab-rule")
RULE = devices.SSU_DEVICE_RULES["NVIDIA H100 80GB HBM3"][2]
VARIANTS = {"base": None, "hf": SSUDeviceRule(1 << 30, 0, 16, 1), "hfe16": SSUDeviceRule(1 << 30, 8 * 128, 16, 1),
            "rule": RULE}


def set_rule(v):
    devices.SSU_DEVICE_RULES = {} if VARIANTS[v] is None else {NAME: {2: VARIANTS[v]}}


CASES = [(a, c, False, "cloned") for a, c in ((1, 1), (2, 2), (4, 4), (8, 8), (9, 9), (9, 16), (16, 16), (32, 32),
                                              (57, 64), (64, 64), (128, 128), (256, 256), (257, 272), (512, 512))]
CASES += [(8, 8, True, "cloned"), (8, 8, False, "fresh"), (64, 64, True, "cloned")]
for part in parts("ssu,ssu-nb"):
    ab_sweep.NEIGHBOUR[0] = part.endswith("-nb")
    SWEEP.run(part, CASES if part == "ssu" else CASES[:8] + CASES[-3:-1], list(VARIANTS), set_rule,
              lambda k: SSUCase(k[0], k[1], D["bf16"], D["bf16"], k[2], k[3], 1, "head"))
set_rule("rule" if NAME == "NVIDIA H100 80GB HBM3" else "base")
print("all done", flush=True)
