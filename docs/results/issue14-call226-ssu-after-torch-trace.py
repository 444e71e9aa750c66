"""Issue 14, call 226 (H200): where the SSU's time goes after a torch kernel at batch 1-2, from a kernel trace of the
after-torch graph (``bench.time_graph_after_torch``'s: a torch ``mul_`` then the SSU, once per pool), mambalab (PDL
on, the tree; PDL off) beside vLLM 0.33. torch.profiler (CUPTI) records each kernel of the replayed graph; per
(torch kernel, SSU kernel) pair: the gap from the torch kernel's end to the SSU's start, the SSU's duration, and the
gap to the next torch kernel. Medians over every pair of 20 replays. Calls 222-225: after a torch kernel ours trails
by 0.3-1.4 us at batch 1-2, more than alone (Nsight Compute, 0.4-0.7 us).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call226-ssu-after-torch-trace.py
"""
import json
import os
import statistics
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import BUDGET, FIX  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
bench._vllm_path()


def trace(calls, replays=20):
    graph = bench.capture_graph(bench.after_torch(calls))
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
    kern = sorted((e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                  if e.device_type == torch.autograd.DeviceType.CUDA)
    pre, dur, post = [], [], []
    for a, b, c in zip(kern, kern[1:], kern[2:]):
        if "mul" in a[2].lower() and "mul" not in b[2].lower() and "mul" in c[2].lower():
            pre.append(b[0] - a[1])
            dur.append(b[1] - b[0])
            post.append(c[0] - b[1])
    med = lambda x: statistics.median(x) if x else float("nan")  # noqa: E731
    return dict(pairs=len(dur), gap_before=med(pre), duration=med(dur), gap_after=med(post),
                names=sorted({k[2][:60] for k in kern}))


rows = []
for state, batch in (("fp32", 1), ("bf16", 1), ("fp32", 2)):
    case = SSUCase(batch, batch, D[state], D["bf16"], False, "cloned", 1)
    for label, impl, pdl in (("ours", "mambalab", "1"), ("ours-nopdl", "mambalab", "0"), ("vllm", "vllm", "1")):
        os.environ["MAMBALAB_PDL"] = pdl
        calls = bench._timed_calls(case, impl, BUDGET, FIX if impl == "mambalab" else None)
        r = trace(calls)
        r.update(state=state, batch=batch, impl=label)
        rows.append(r)
        print(f"{state} {batch} {label:10s}: gap before {r['gap_before']:5.2f} us, kernel {r['duration']:5.2f} us, "
              f"gap after {r['gap_after']:5.2f} us ({r['pairs']} pairs) {r['names']}", flush=True)
        del calls
    os.environ["MAMBALAB_PDL"] = "1"
with open(os.path.join(os.environ.get("OUT", "."), "trace.json"), "w") as f:
    json.dump(rows, f, indent=0)
print("all done", flush=True)
