"""Issue 14, call 145: the decode kernels as a layer runs them, in pairs: the conv, then the SSU (a Mamba2 layer,
``mamba_mixer2``) or the GDN's kernel (Qwen3-Next's gated delta net, gates in the kernel: the packed decode, or the
fused-gating call for speculative decoding), ours after ours and vLLM 0.33's after vLLM's, each launch of the graph on
its own pools. Ours overlap where the conv lets its dependents start (PDL, small batches); vLLM's kernels do not use
PDL. Time per pair, and each kernel alone in the bench's harness (after itself); "pair - conv" is what the second
kernel adds after the conv. Also the speculative GDN rows (T = 2 at 8 / 64 / 256) after the gates were hoisted out of
the speculative streaming kernel's block loop. Call 146 ran it again with ``NEIGHBOUR=1``: before each pair a torch
kernel that does not trigger PDL (as the previous layer's ``out_proj`` / ``in_proj`` in a model: the conv follows
torch ops), the graph of those kernels alone subtracted (``bench.time_graph_after_torch``'s harness); only the pairs.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call145-layer-pairs.py
    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT NEIGHBOUR=1 python3 docs/results/issue14-call145-layer-pairs.py
"""
import json
import os
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase, SSUCase, agreement  # noqa: E402
from mambalab.lab.bugs import BugConfig  # noqa: E402

D, FIX, BUDGET = bench.DTYPES, BugConfig.fixed(), 8 * 2**30
print("device", torch.cuda.get_device_name(), flush=True)
bench._vllm_path()
copy = bench.copy_bandwidth()
print(f"copy {copy:.0f} GB/s", flush=True)


def calls(case, impl):
    return bench._timed_calls(case, impl, BUDGET, FIX if impl == "mambalab" else None)


NB = os.environ.get("NEIGHBOUR") == "1"


def pair(conv, second, impl):
    a, b = calls(conv, impl), calls(second, impl)
    n = min(len(a), len(b))
    pairs = [(lambda x=x, y=y: (x(), y())) for x, y in zip(a[:n], b[:n])]
    both = bench.time_graph_after_torch(pairs) if NB else bench.time_graph(pairs)
    alone_conv, alone = bench.time_graph(a[:n]), bench.time_graph(b[:n])
    return both, alone_conv, alone


rows = []
for layer in ("ssu", "gdn"):
    for state in ("bf16", "fp32"):
        for batch, T in ((1, 1), (2, 1), (4, 1), (8, 1), (16, 1), (64, 1), (256, 1), (1, 2), (8, 2)):
            conv_state = "bf16"  # the conv state in the activations' dtype, as vLLM keeps it
            conv = ConvCase(batch, batch, D[conv_state], D["bf16"], True, "cloned", T)
            if layer == "ssu":
                second = SSUCase(batch, batch, D[state], D["bf16"], False, "cloned", T, "head")
            else:
                second = GDNCase(batch, batch, D[state], D["bf16"], True, "cloned", T)
            ok, msg = agreement(second, ["mambalab", "vllm"])
            res = {impl: [pair(conv, second, impl) for _ in range(2)] for impl in ("mambalab", "vllm")}
            best = {impl: [min(r[i] for r in res[impl]) for i in range(3)] for impl in res}
            m, v = best["mambalab"], best["vllm"]
            print(f"{layer} {state} b={batch} T={T}: pair ours {m[0]:7.2f} vllm {v[0]:7.2f} ({v[0] / m[0]:.3f}x) | "
                  f"pair-conv ours {m[0] - m[1]:6.2f} vllm {v[0] - v[1]:6.2f} | alone ours {m[2]:6.2f} vllm {v[2]:6.2f} "
                  f"({v[2] / m[2]:.3f}x) conv ours {m[1]:5.2f} vllm {v[1]:5.2f} | gate {'ok' if ok else 'FAIL ' + msg}",
                  flush=True)
            rows.append(dict(layer=layer, state=state, batch=batch, T=T, mambalab=m, vllm=v, gate=ok))
            with open(os.path.join(os.environ.get("OUT", "."), f"layer-pairs{'-nb' if NB else ''}.json"), "w") as f:
                json.dump(dict(copy_gbps=copy, rows=rows), f, indent=0)
            del conv, second
            torch.cuda.empty_cache()
for state in ("bf16", "fp32") if not NB else ():
    for batch in (8, 64, 256):
        case = GDNCase(batch, batch, D[state], D["bf16"], True, "cloned", 2)
        m, v = (min(bench.time_graph(calls(case, i)) for _ in range(2)) for i in ("mambalab", "vllm"))
        print(f"gdn spec {state} T=2 b={batch}: ours {m:7.2f} vllm {v:7.2f} ({v / m:.3f}x)", flush=True)
print("all done", flush=True)
