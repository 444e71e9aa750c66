"""Issue 14, call 60: two rows a hair under their 1.1x and one behind vLLM.

* GDN bf16 state, T = 3 / 4 at batch 64 (1.088 / 1.094x in call 53): the general kernel's pipelined token loop
  (SPEC_TOKEN_STAGES, from 128 sequences) and the early index load (EARLY_INDEX, bf16 from 128) brought down to 64,
  alone and together (batch 32-128).
* SSU fp32 state, A/dt per element, batch 1 (0.911x): the small tile's rows (UNTIED_BLOCK_M_SMALL 2: 1 and 4) and
  PDL for the small fp32 tiles (PDL_FP32_NO_PDL_BLOCK_M 0).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call60-gdn-spec64.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase, SSUCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdr  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-gdn-spec64")
TODO = parts("gdn,ssu")

if "gdn" in TODO:
    base = (gdr.SPEC_TOKEN_STAGES_MIN_N, dict(gdr.EARLY_INDEX))

    def set_gdn(v):
        gdr.SPEC_TOKEN_STAGES_MIN_N, gdr.EARLY_INDEX = base[0], dict(base[1])
        if v in ("stages", "both"):
            gdr.SPEC_TOKEN_STAGES_MIN_N = 32
        if v in ("idx", "both"):
            gdr.EARLY_INDEX[2] = (32, 1 << 30)

    cases = [(T, b) for T in (3, 4) for b in (32, 64, 128)]
    SWEEP.run("gdn", cases, {"base": 0, "stages": 1, "idx": 2, "both": 3}, set_gdn,
              lambda k: GDNCase(k[1], k[1], D["bf16"], D["bf16"], True, "cloned", k[0]))
    set_gdn("base")

if "ssu" in TODO:
    sbase = (dict(ms.UNTIED_BLOCK_M_SMALL), ms.PDL_FP32_NO_PDL_BLOCK_M)

    def set_ssu(v):
        ms.UNTIED_BLOCK_M_SMALL, ms.PDL_FP32_NO_PDL_BLOCK_M = dict(sbase[0]), sbase[1]
        if v in ("m1", "m4"):
            ms.UNTIED_BLOCK_M_SMALL[4] = int(v[1])
        if v == "pdl":
            ms.PDL_FP32_NO_PDL_BLOCK_M = 0

    cases = [("fp32", b) for b in (1, 2, 4)]
    SWEEP.run("ssu", cases, {"base": 0, "m1": 1, "m4": 2, "pdl": 3}, set_ssu,
              lambda k: SSUCase(k[1], k[1], D[k[0]], D["bf16"], False, "cloned", 1, "element"))
