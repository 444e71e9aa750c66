"""Issue 14, call 129: the GDN's streaming kernel with its two blocks read as soon as the slot is known
(``gated_delta_rule.STREAM_EARLY_STATE``, the kernel's ``EARLY_STATE``), before PDL's wait ("pdl": the layer's
``early_state_load`` promise, as the general kernel's early state load), so a launch's first state reads overlap the
previous launch's tail in a CUDA graph; against the pipelined loop waiting first ("base", the rule). Also: the same
without PDL ("early": the loads only reordered), PDL capped at 128 registers ("pdl-c128": the early blocks take 168
by the local compile, the loop 128) and on 2 warps ("pdl-w2"). bf16 from 16 (the bf16 rule's range) and fp32 8-32
(the fp32 rule's), beside vLLM.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call129-gdn-stream-early.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, register_cap  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402

D = bench.DTYPES
CAP = register_cap((gdn._gdn_stream_kernel,))
print("device", torch.cuda.get_device_name(), flush=True)
SWEEP = Sweep("ab-gdn-stream-early")
CONFIG, PDL, WARPS = gdn.launch_config, gdn.use_pdl, [0]
gdn.launch_config = lambda *a, **k: (*CONFIG(*a, **k)[:2], WARPS[0]) if WARPS[0] else CONFIG(*a, **k)
ALL = {2: (1, 1 << 30, False), 4: (1, 1 << 30, False)}


def setv(v):
    gdn.STREAM_EARLY_STATE = {} if v == "base" else ALL
    gdn.use_pdl = (lambda device: False) if v == "early" else PDL
    CAP[0] = 128 if v == "pdl-c128" else 0
    WARPS[0] = 2 if v == "pdl-w2" else 0


variants = {"base": 0, "pdl": 1, "early": 2, "pdl-c128": 3, "pdl-w2": 4}
cases = [("bf16", a, c) for a, c in ((16, 16), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256), (512, 512))]
cases += [("fp32", a, c) for a, c in ((8, 8), (16, 16), (32, 32))]
SWEEP.run("gdn", cases, variants, setv, lambda k: GDNCase(k[1], k[2], D[k[0]], D["bf16"], True, "cloned", 1))
