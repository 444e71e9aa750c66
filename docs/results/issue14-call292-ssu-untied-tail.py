"""Issue 14, call 292 (H200): ``A``/``dt`` per element with a bf16 state, the several-requests kernel at batches its 4
requests a program do not divide (``mamba_ssm_untied.UNTIED_TAIL``: the last group's requests past the batch's end
masked). Until now those batches ran the one-request kernel: NemotronH-8B's 128 heads at 8 requests 11.04 us, at 9
15.40 us (call 291). "base" as committed (off), "tail" on; batches 8 / 12 / 16 / 64 / 256 as the control (unchanged
launches), the rest with a tail; gated beside vLLM, in the bench and after a torch kernel ("-nb").

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call292-ssu-untied-tail.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.kernels import mamba_ssm_untied  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)


def setv(v):
    mamba_ssm_untied.UNTIED_TAIL = v == "tail"


def untied(k):  # (active, captured)
    return SSUCase(*k, D["bf16"], D["bf16"], False, "cloned", 1, dt="element")


keys = [(b, b) for b in (8, 9, 10, 11, 12, 13, 15, 16, 17, 33, 57, 63, 64, 65, 255, 256, 257)] + [(57, 63)]
Sweep("ab-untied-tail").run_parts(parts("ssu,ssu-nb"), keys, ("base", "tail"), setv, untied)
print("all done", flush=True)
