"""Issue 14, call 238 (H200): where the SSU's CUDA kernel of call 237 wins, batch by batch. Call 237's definitions
(its kernel, launcher and shapes, run from its own file up to its checks) with other sweeps: the bf16 state at
1-16 requests on "r32" / "r16", the fp32 state at 1-4 on "r16" / "r8", fp32 activations, ``z``, and more layer pairs.
Bench, after a torch kernel ("-nb"), and as a layer runs it (the conv, then the SSU); the agreement gate on each.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call238-ssu-tma-range.py
"""
from pathlib import Path

HEAD = Path(__file__).resolve().with_name("issue14-call237-ssu-tma.py")
_src = HEAD.read_text()
exec(compile(_src[:_src.index("\nfor s_dt, a_dt, zs in")], str(HEAD), "exec"), g := {"__file__": str(HEAD),
                                                                                     "__name__": "call237"})
Sweep, pair_sweep, parts, SSUCase, ConvCase, D, FORCE = (g[k] for k in (
    "Sweep", "pair_sweep", "parts", "SSUCase", "ConvCase", "D", "FORCE"))


def setv(v):
    FORCE[0] = None if v == "base" else v


PARTS = parts("bf16,bf16-nb,fp32,fp32-nb,ff,ff-nb,z,z-nb,zf,zf-nb,pairs")
BF = [(n, n) for n in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 16)]
sw = Sweep("ab-ssu-tma-range")
for part in PARTS:
    kind = part.removesuffix("-nb")
    if kind == "bf16":
        sw.run_parts([part], BF, ("base", "r32", "r16"), setv,
                     lambda k: SSUCase(k[0], k[1], D["bf16"], D["bf16"], False, "cloned", 1))
    elif kind == "fp32":
        sw.run_parts([part], [(1, 1), (2, 2), (3, 3), (4, 4), (5, 5)], ("base", "r16", "r8"), setv,
                     lambda k: SSUCase(k[0], k[1], D["fp32"], D["bf16"], False, "cloned", 1))
    elif kind == "ff":
        sw.run_parts([part], [(1, 1), (2, 2), (4, 4)], ("base", "r16", "r8"), setv,
                     lambda k: SSUCase(k[0], k[1], D["fp32"], D["fp32"], False, "cloned", 1))
    elif kind == "z":
        sw.run_parts([part], [(1, 1), (2, 2), (4, 4), (8, 8), (9, 9)], ("base", "r32", "r16"), setv,
                     lambda k: SSUCase(k[0], k[1], D["bf16"], D["bf16"], True, "cloned", 1))
    elif kind == "zf":
        sw.run_parts([part], [(1, 1), (2, 2), (8, 8)], ("base", "r16", "r8"), setv,
                     lambda k: SSUCase(k[0], k[1], D["fp32"], D["bf16"], True, "cloned", 1))
if "pairs" in PARTS:
    for st, vs, shapes in ((D["bf16"], ("base", "r32", "r16"), ((2, 2), (9, 9), (12, 12), (8, 16))),
                           (D["fp32"], ("base", "r16", "r8"), ((1, 1), (2, 2), (3, 3)))):
        tag = "b" if st == D["bf16"] else "f"
        pair_sweep(f"conv+ssu {tag}b", shapes,
                   lambda a, c, st=st: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                                        SSUCase(a, c, st, D["bf16"], False, "cloned", 1)),
                   vs, setv, f"ssu-tma-range-pairs-{tag}.json")
print("all done", flush=True)
