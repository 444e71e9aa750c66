"""Issue 14, call 120: register caps (ptxas ``maxnreg``) on the other one-warp kernels with many registers, after
calls 117-119 (the SSU's bf16 token loop 148 -> 128: +3-5%): the SSU's streaming kernel (bf16, two tokens, batch 32
and up: 128 registers), the SSU's several-requests kernel for ``A``/``dt`` per element (bf16: 121), the GDN's
two-token streaming kernel (bf16 from batch 64). "base" uncapped, "cN" capped at N, beside vLLM.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT PARTS=stream,untied,gdn2 python3 docs/results/issue14-call120-caps-more.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, parts, register_cap  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase, SSUCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-caps-more")
CAP = register_cap((ms._ssu_stream_kernel, ms._ssu_untied_reqs_kernel, gdn._gdn_spec_stream_kernel))



def setv(v):
    CAP[0] = int(v[1:]) if v != "base" else 0


caps = {"base": 0, "c112": 1, "c104": 2, "c96": 3}
todo = parts("stream,untied,gdn2")
if "stream" in todo:
    SWEEP.run("stream", [32, 64, 128, 256], caps, setv,
              lambda b: SSUCase(b, b, D["bf16"], D["bf16"], False, "cloned", 2, "head"))
if "untied" in todo:
    SWEEP.run("untied", [8, 16, 64, 256, 512], caps, setv,
              lambda b: SSUCase(b, b, D["bf16"], D["bf16"], False, "cloned", 1, "element"))
if "gdn2" in todo:
    SWEEP.run("gdn2", [64, 128, 256], caps, setv,
              lambda b: GDNCase(b, b, D["bf16"], D["bf16"], True, "cloned", 2))
