"""Issue 14, call 31: the conv window kernel's PTX before (HEAD's lib, $BEFORE) and after (the tree's) at the bench's
shapes (fp32 / bf16 state, T = 2..4, batch 8 / 64 / 256), each side compiled by the JIT into its own cache; the PTX
compared per kernel with .loc/.file lines, debug sections and $L__tmpN labels filtered.

    BEFORE=build/c31/before_lib python3 docs/results/issue14-call31-ptx-conv.py
"""
import collections
import glob
import hashlib
import os
import re
import subprocess
import sys

SIDES = {"before": os.environ.get("BEFORE", "build/c31/before_lib"), "after": "lib"}

if len(sys.argv) > 1:  # one side: compile every shape on the GPU
    sys.path.insert(0, sys.argv[1])
    import torch
    from mambalab.kernels import causal_conv1d as cv
    print(cv.__file__, flush=True)
    for dt in (torch.float32, torch.bfloat16):
        for T in (2, 3, 4):
            for B in (8, 64, 256):
                dim, width = 8192, 4
                x = torch.randn(B * T, dim, dtype=dt, device="cuda")
                st = cv.make_conv_state(B + 1, dim, width - 1 + T - 1, dt, "cuda")
                cv.causal_conv1d_update(
                    x, st, torch.randn(dim, width, dtype=dt, device="cuda"), torch.randn(dim, dtype=dt, device="cuda"),
                    activation="silu", conv_state_indices=torch.arange(1, B + 1, dtype=torch.int32, device="cuda"),
                    out=torch.empty_like(x), num_accepted_tokens=torch.ones(B, dtype=torch.int32, device="cuda"),
                    query_start_loc=torch.arange(0, B * T + 1, T, dtype=torch.int32, device="cuda"), max_query_len=T)
            x = torch.randn(B, dim, dtype=dt, device="cuda")  # the plain decode step too
            st = cv.make_conv_state(B + 1, dim, width - 1, dt, "cuda")
            cv.causal_conv1d_update(x, st, torch.randn(dim, width, dtype=dt, device="cuda"), None, activation="silu",
                                    conv_state_indices=torch.arange(1, B + 1, dtype=torch.int32, device="cuda"))
    torch.cuda.synchronize()
    sys.exit(0)


def ptx(cache):
    out = collections.defaultdict(set)
    for f in glob.glob(f"{cache}/**/*.ptx", recursive=True):
        t = open(f).read()
        t = re.sub(r"\.section\s+\.debug.*", "", t, flags=re.S)
        t = "\n".join(l for l in t.splitlines() if not l.lstrip().startswith((".loc", ".file"))
                      and not re.fullmatch(r"\$L__tmp\d+:", l.strip()))
        out[re.search(r"\.entry\s+(\w+)", t).group(1)].add(hashlib.sha1(t.encode()).hexdigest())
    return out


res = {}
for side, lib in SIDES.items():
    cache = f"/tmp/tc31-{side}"
    subprocess.run(["rm", "-rf", cache], check=True)
    env = dict(os.environ, TRITON_CACHE_DIR=cache, MAMBALAB_DEVICE="cuda", PYTHONPATH=os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, __file__, lib], env=env, check=True)
    res[side] = ptx(cache)
b, a = res["before"], res["after"]
for k in sorted(set(a) | set(b)):
    print(f"PTX {k:32s} before {len(b[k])} variants, after {len(a[k])}: {'same' if b[k] == a[k] else 'DIFFERENT'}")
