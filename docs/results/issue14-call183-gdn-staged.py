"""Issue 14, call 183: the GDN streaming kernel's bf16 one-token step with both state blocks' asynchronous copies
issued before PDL's wait (``STAGED``): the pipelined loop (``num_stages`` 3 for its 2 blocks) puts both copies in its
prologue, into shared memory, and the wait sits in the loop's first iteration, in a nested region the pipeliner leaves
in place; the token's loads (``q``/``k``/``a``/``b``, the head's parameters) add the wait's value to their addresses,
so none can be issued before it (checked in the PTX below: every ``cp.async`` of the state before the first
``griddepcontrol.wait``, the token's ``ld.global`` after it). Against the tree's ``EARLY_ONE`` (the first block into
registers before the wait, the second after the first block's arithmetic; capped at 128 registers), whose second
block's latency is exposed in every program. Local sm_90 compile: 168 registers uncapped (12 programs an SM), 128
under the cap with no spill; 2 stages (only the first block early): 150 / 128.

Variants (a launch wrapper rewrites the streaming kernel's bf16 EARLY_ONE launches): "base"; "st3" 3 stages,
uncapped; "st3c" 3 stages capped at 128; "st2c" 2 stages capped at 128. GDN bf16 state and activations in both
harnesses (the bench's; after a torch kernel), then layer pairs (a torch kernel, the conv with its trigger, the
packed decode; the torch kernel subtracted).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call183-gdn-staged.py
"""
import re
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

import ab_sweep  # noqa: E402
from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule as gdn  # noqa: E402
from mambalab.lab import sanitizer  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), "triton", __import__("triton").__version__, flush=True)
SHAPES = {"base": None, "st3": (3, None), "st3c": (3, 128), "st2c": (2, 128)}
CUR = ["base"]
SEEN = {}
_launch = sanitizer.launch


def _staged(kernel, grid, *args, **kwargs):
    shape = SHAPES[CUR[0]]
    if shape and kernel is gdn._gdn_stream_kernel and kwargs.get("EARLY_ONE"):
        kwargs = dict(kwargs, EARLY_STATE=False, EARLY_ONE=False, STAGED=True, STAGES=shape[0])
        kwargs.pop("maxnreg", None)
        if shape[1]:
            kwargs["maxnreg"] = shape[1]
        compiled = _launch(kernel, grid, *args, **kwargs)
        if CUR[0] not in SEEN and compiled is not None and hasattr(compiled, "asm"):
            SEEN[CUR[0]] = compiled
        return compiled
    return _launch(kernel, grid, *args, **kwargs)


sanitizer.launch = _staged


def setv(v):
    CUR[0] = v


def order_check():
    """The PTX's memory and control events in text order, runs of one kind collapsed (read with the loop's labels:
    the prologue's copies come before the loop's first label, the wait inside it)."""
    for name, k in SEEN.items():
        events = []
        for line in k.asm["ptx"].splitlines():
            m = re.search(r"(griddepcontrol\.\w+|cp\.async\.c[ag]|ld\.global|st\.global|^\$L__BB\w+|bra)", line)
            if m:
                ev = m.group(1)
                if events and events[-1][0] == ev:
                    events[-1][1] += 1
                else:
                    events.append([ev, 1])
        regs, spills = getattr(k, "n_regs", "?"), getattr(k, "n_spills", "?")
        print(f"ptx {name} (registers {regs}, spills {spills}): " + " ".join(f"{e}x{n}" for e, n in events), flush=True)


VARIANTS = tuple(SHAPES)
CASES = [("bf16", "bf16") + s for s in ((9, 16), (16, 16), (32, 32), (57, 64), (64, 64), (128, 128), (256, 256))]
PARTS = parts("gdn,gdn-nb,pairs")
SWEEP = Sweep("ab-staged")
for part in [p for p in PARTS if p != "pairs"]:
    ab_sweep.NEIGHBOUR[0] = part.endswith("-nb")
    SWEEP.run(part, CASES, {v: i for i, v in enumerate(VARIANTS)}, setv,
              lambda k: GDNCase(k[2], k[3], D[k[0]], D[k[1]], True, "cloned", 1))
    if part == "gdn":
        order_check()
if "pairs" in PARTS:
    pair_sweep("conv+gdn bf16", ((16, 16), (32, 32), (64, 64), (128, 128)),
               lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                             GDNCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1)),
               VARIANTS, setv, "staged-pairs-bf16.json")
print("all done", flush=True)
