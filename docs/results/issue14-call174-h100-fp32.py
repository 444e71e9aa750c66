"""Issue 14, call 174: the fp32-state rows an H100 still reads behind or under 1.1x after calls 171-173.

* "ssu-el": the SSU with ``A``/``dt`` per element, fp32 state, bf16 activations, at 8-512 (call 173's recording:
  64 / 256 / 512 1.006 / 0.998 / 0.990x). Beside the rule ("base": 4 rows on one warp, one request a program, no
  PDL for so small a tile): PDL on the 4-row tile ("p4"), ``launch_config_override`` 8 rows on 1 / 2 warps, 16 on 2
  ("m08w1", "m08w2", "m16w2"), 2 or 4 requests a program on 4 rows (``mamba_ssm_untied.UNTIED_REQS``: "r2", "r4").
* "gdn": the GDN's streaming kernel for an fp32 state at 4-32 (call 173: 8 / 9 1.068-1.073x, fp32 activations
  1.050 / 1.052x; 1.1x asked). Beside the rule (``STREAM[4]``: 2 blocks of 4 rows, 2 stages, 8 to 32 sequences):
  8-row blocks ("s8x2"), one stage ("s4x2s1", "s8x2s1"), and the general kernel ("gen": the streaming kernel off).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call174-h100-fp32.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase, SSUCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402
from mambalab.kernels import mamba_ssm_untied as untied  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-fp32")
PDL_MIN, REQS, STREAM = ms.PDL_FP32_NO_PDL_BLOCK_M, dict(untied.UNTIED_REQS), dict(gdn.STREAM)
SSU_V = ["base", "p4", "m08w1", "m08w2", "m16w2", "r2", "r4"]
GDN_V = {"base": STREAM[4], "s8x2": (8, 2, 2, 8, 32), "s4x2s1": (4, 2, 1, 8, 32), "s8x2s1": (8, 2, 1, 8, 32),
         "gen": None}


def set_ssu(v):
    ms.PDL_FP32_NO_PDL_BLOCK_M = 2 if v == "p4" else PDL_MIN
    ms._override = ms.LaunchConfig(int(v[1:3]), int(v[-1])) if v.startswith("m") else None
    untied.UNTIED_REQS = {**REQS, 4: [(int(v[1]), 1, 1 << 30, 4)]} if v.startswith("r") else REQS


def set_gdn(v):
    gdn.STREAM = {k: s for k, s in {**STREAM, 4: GDN_V[v]}.items() if s is not None}


for part in parts("ssu-el,gdn"):
    if part == "ssu-el":
        SWEEP.run(part, [(b, b) for b in (8, 64, 128, 256, 512)], SSU_V, set_ssu,
                  lambda k: SSUCase(k[0], k[1], D["fp32"], D["bf16"], False, "cloned", 1, "element"))
    else:
        cases = [(a, c, "bf16") for a, c in ((4, 4), (8, 8), (9, 9), (9, 16), (16, 16), (32, 32))]
        SWEEP.run(part, cases + [(8, 8, "fp32"), (9, 9, "fp32")], list(GDN_V), set_gdn,
                  lambda k: GDNCase(k[0], k[1], D["fp32"], D[k[2]], True, "cloned", 1))
print("all done", flush=True)
