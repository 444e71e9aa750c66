import sys, torch
from mambalab.gpu import bench
from mambalab.gpu.bench_cases import SSUCase
for st in ("fp32", "bf16"):
    for T in (1, 2):
        for b in (1, 8, 64):
            for dtm in ("head", "element"):
                c = SSUCase(b, b, bench.DTYPES[st], torch.bfloat16, False, "cloned", T, dtm)
                p = c.make_pools(1)[0]
                import mambalab.kernels.mamba_ssm as sm
                o = sm.selective_state_update(p, c.x, c.dt, c.A, c.B, c.C, c.D, dt_bias=c.dt_bias, dt_softplus=True,
                    state_batch_indices=c.idx, out=c.out, **({} if T == 1 else dict(dst_state_batch_indices=c.idx,
                    num_accepted_tokens=c.num_acc, cu_seqlens=c.cu)))
torch.cuda.synchronize(); print("ok", sm.__file__)
