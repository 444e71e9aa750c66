"""Issue 14, call 291 (H200): a bf16 state with ``A``/``dt`` per element, 9 live requests padded to 16, costs as much
as 16 live ones with Falcon-H1's rows halved (call 290: 16.0 us against 10.5 for 9 unpadded; the L2 hint is not it)
and nothing with the table's rows (10.6 us), while a padded program leaves after its index test. The grid's order
for it: as committed ("base": heads first, requests zigzagged), requests in order ("nozig"), requests before heads
("nohf"); each with the halved rows and the table's ("-div0"); PDL off ("nopdl", halved). Falcon-H1-1.5B at 9, 9 ->
16 and 16, NemotronH-8B at 8 and 9 -> 16 (the same question at the main shape: 11.1 us at 8, 17.0 at 9 -> 16 in
call 290). Gated beside vLLM, in the bench and after a torch kernel ("-nb").

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call291-ssu-untied-padded.py
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
DIV, PDL = mamba_ssm_kernels.WIDE_STATE_DIV, mamba_ssm.use_pdl
VARIANTS = ("base", "base-div0", "nozig", "nozig-div0", "nohf", "nohf-div0", "nopdl")


def setv(v):
    mamba_ssm_kernels.WIDE_STATE_DIV = 0 if v.endswith("div0") else DIV
    mamba_ssm.ZIGZAG_ROWS = not v.startswith("nozig")
    mamba_ssm.HEADS_FIRST_GRID = not v.startswith("nohf")
    mamba_ssm.use_pdl = (lambda device: False) if v == "nopdl" else PDL


def untied(k):  # (model, (active, captured))
    return SSUCase(*k[1], D["bf16"], D["bf16"], False, "cloned", 1, dt="element", shape=ssu_shape(k[0], 1))


keys = ([("Falcon-H1-1.5B", b) for b in ((9, 9), (9, 16), (16, 16))]
        + [("NemotronH-8B", b) for b in ((8, 8), (9, 9), (9, 16))])
Sweep("ab-untied-padded").run_parts(parts("ssu,ssu-nb"), keys, VARIANTS, setv, untied)
print("all done", flush=True)
