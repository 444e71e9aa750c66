"""Issue 14, call 64: several tokens a request, each token's store slot loaded with the token's inputs (masked to the
index row) instead of after its output, in the SSU's and the GDN's general kernels (mamba_ssm.SPEC_EARLY_DST,
gated_delta_rule.SPEC_EARLY_DST): one memory round trip fewer in each token's chain. Counters (call 56): both kernels
stall on memory (long scoreboard 5.6-6.2 per issue) at 12-16 programs an SM. Beside vLLM, A/B interleaved.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call64-early-dst.py

(As run, on booleans; the rules taken after it are mamba_ssm.SPEC_EARLY_DST_MAX and gated_delta_rule.SPEC_EARLY_DST
by element size: call 65's script measures them.)
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
SWEEP = Sweep("ab-early-dst")
TODO = parts("ssu,gdn")
V = {"base": False, "early": True}
cases = [("bf16", T, b) for T in (3, 4) for b in (1, 8, 64, 256)] + [("bf16", 2, 8)] + [
    ("fp32", T, b) for T in (2, 3, 4) for b in (8, 64)]

if "ssu" in TODO:
    SWEEP.run("ssu", cases, V, lambda v: setattr(ms, "SPEC_EARLY_DST", V[v]),
              lambda k: SSUCase(k[2], k[2], D[k[0]], D["bf16"], False, "cloned", k[1]))
if "gdn" in TODO:
    SWEEP.run("gdn", cases, V, lambda v: setattr(gdr, "SPEC_EARLY_DST", V[v]),
              lambda k: GDNCase(k[2], k[2], D[k[0]], D["bf16"], True, "cloned", k[1]))
