"""Issue 14, call 290 (H200): why a bf16 state with ``A``/``dt`` per element at Falcon-H1's 256-wide state runs 9 live
requests padded to 16 in 16.3 us with its rows halved (as 16 live: 19.2 us) and in 10.6 us with the table's rows
(call 289). Both tile sizes with and without the untied L2 hint (``PREFETCH_STATE_UNTIED``, bf16 mode 2 up to 8 x 128
request x heads, measured at 128 heads in call 44; at Falcon-H1-1.5B's 48 heads it reaches batch 21): "base" (halved,
hint), "div0" (table's rows, hint), "nopf" (halved, no hint), "div0-nopf"; the same at NemotronH-8B's 128 x 64 x 128
(no halving there: base = div0) as the control. Gated beside vLLM, in the bench and after a torch kernel ("-nb").

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call290-ssu-untied-wide-hint.py
"""
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402
from mambalab.gpu.model_shapes import ssu_shape  # noqa: E402
from mambalab.kernels import mamba_ssm, mamba_ssm_kernels  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
DIV, HINT = mamba_ssm_kernels.WIDE_STATE_DIV, dict(mamba_ssm.PREFETCH_STATE_UNTIED)
VARIANTS = ("base", "div0", "nopf", "div0-nopf")


def setv(v):
    mamba_ssm_kernels.WIDE_STATE_DIV = 0 if v.startswith("div0") else DIV
    mamba_ssm.PREFETCH_STATE_UNTIED = {} if v.endswith("nopf") else dict(HINT)


def untied(k):  # (model, (active, captured))
    return SSUCase(*k[1], D["bf16"], D["bf16"], False, "cloned", 1, dt="element", shape=ssu_shape(k[0], 1))


keys = ([("Falcon-H1-1.5B", b) for b in ((1, 1), (2, 2), (4, 4), (8, 8), (9, 9), (12, 12), (16, 16), (9, 16),
                                         (20, 20), (24, 24))]
        + [("NemotronH-8B", b) for b in ((4, 4), (8, 8), (9, 16))])
Sweep("ab-untied-wide-hint").run_parts(parts("ssu,ssu-nb"), keys, VARIANTS, setv, untied)
print("all done", flush=True)
