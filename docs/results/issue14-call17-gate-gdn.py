import torch
from mambalab.gpu import bench
from mambalab.gpu.bench_cases import GDNCase
for st in ("fp32", "bf16"):
    for T in (1, 2):
        for b in (1, 8, 64):
            c = GDNCase(b, b, bench.DTYPES[st], torch.bfloat16, False, "cloned", T)
            p = c.make_pools(1)[0]
            c.call("mambalab", p)
torch.cuda.synchronize(); import mambalab.kernels.gated_delta_rule as g; print("ok", g.__file__)
