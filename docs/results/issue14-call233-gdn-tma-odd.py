"""Issue 14, call 233 (H200): the GDN bf16 packed decode on the TMA kernel in the token floor's fastest shape (call 228)
(``issue14-call233-gdn-tma-odd.cu``): one-warp CTAs whose odd row blocks read their state after PDL's wait, the even
ones before it. "r16w1" call 217's 16-row CTAs (all early; level with the tree from 64 there); "r16o" / "r32o" 16- /
32-row CTAs with the odd ones after the wait; "base" the tree (the Triton kernel from 17 requests, r32w1 from 4 to 16).
Before timing: each shape against the torch reference on fresh inputs with null rows (outputs poisoned), then the
A/B's agreement gate. Bench, after a torch kernel ("-nb"), and as a layer runs it (the conv, then the GDN).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call233-gdn-tma-odd.py
"""
import sys
from pathlib import Path

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase  # noqa: E402
from mambalab.kernels import gated_delta_rule_packed as gdp  # noqa: E402
from mambalab.kernels import gated_delta_rule_tma as tma  # noqa: E402
from mambalab.kernels.testing import poison_  # noqa: E402

sys.path.append("tests")
from test_kernel_gated_delta_rule import _gen, make_pool  # noqa: E402
from test_kernel_gdn_packed import _packed  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)


class Odd(tma.TmaShape):
    """One-warp CTAs of ``rows`` rows, the odd row blocks' state after PDL's wait (``early_pieces`` -1 only tells it
    from the all-early shape of the same rows)."""
    __slots__ = ()

    @property
    def entry(self) -> str:
        return f"gdn_tma_r{self.rows}_w1_odd"


T = tma.TmaShape
NEW = {"r16w1": T(16, 1, True, False, 1), "r16o": Odd(16, 1, True, False, 1, 0, -1),
       "r32o": Odd(32, 1, True, False, 1, 0, -1)}
tma.SOURCE = Path(__file__).resolve().with_suffix(".cu")
tma.SHAPES = tma.SHAPES + tuple(NEW.values())
SHAPES = {"base": None, **NEW}
dev = torch.device("cuda", torch.cuda.current_device())
drv = tma._get_driver()
for name, shape in NEW.items():
    fn = drv.function(dev, shape.entry)
    print(f"{name}: {drv.blocks_per_sm(fn, 32 * shape.warps, tma.shape_smem(shape))} CTAs an SM", flush=True)


def check(shape, N, null_rows, seed, H=16, HV=32):
    """One call of ``shape`` (through the packed decode, forced) against its torch reference: (max |out - ref|, max
    |pool - ref|, null rows zero and untouched slots bit-identical)."""
    gen = _gen(seed)
    slots = N + 3
    mixed, a, b, A_log, dt_bias, idx = _packed(gen, N, H, HV, 128, 128, torch.bfloat16, slots=slots,
                                               null_rows=null_rows)
    _, pool = make_pool(gen, slots, HV, 128, 128, torch.bfloat16)
    before, pool_ref = pool.clone(), pool.clone()
    out = poison_(torch.empty(N, 1, HV, 128, device=dev, dtype=torch.bfloat16))
    out_ref = torch.empty_like(out)
    tma.FORCE = shape
    gdp.fused_recurrent_gated_delta_rule_packed_decode(mixed, a, b, A_log, dt_bias, 128 ** -0.5, pool, out, idx,
                                                       True, early_state_load=True)
    tma.FORCE = None
    gdp.fused_recurrent_gated_delta_rule_packed_decode_ref(mixed, a, b, A_log, dt_bias, 128 ** -0.5, pool_ref,
                                                           out_ref, idx, True)
    torch.cuda.synchronize()
    live = (idx > 0).cpu()
    touched = torch.zeros(slots, dtype=torch.bool)
    touched[idx.cpu()[live].long()] = True
    ok = torch.equal(out[~live], torch.zeros_like(out[~live])) and torch.equal(pool[~touched], before[~touched])
    do = (out[live].float() - out_ref[live].float()).abs().max().item()
    ds = (pool.float() - pool_ref.float()).abs().max().item()
    return do, ds, ok


for name, shape in NEW.items():
    for N, nulls in ((1, 0), (7, 2), (64, 5), (257, 20)):
        do, ds, ok = check(shape, N, nulls, 900 + N)
        print(f"check {name} N={N}: out {do:.2e} state {ds:.2e} untouched+null rows {'ok' if ok else 'BAD'}",
              flush=True)


def setv(v):
    tma.FORCE = SHAPES[v]


VARIANTS = tuple(SHAPES)
CASES = [(8, 8), (16, 16), (32, 32), (57, 64), (64, 64), (128, 128)]
PARTS = parts("gdn,gdn-nb,pairs")
Sweep("ab-gdn-tma-odd").run_parts(PARTS, CASES, VARIANTS, setv,
                                  lambda k: GDNCase(k[0], k[1], D["bf16"], D["bf16"], True, "cloned", 1))
if "pairs" in PARTS:
    pair_sweep("conv+gdn bf16", ((8, 8), (16, 16), (32, 32), (64, 64), (128, 128)),
               lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                             GDNCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1)),
               VARIANTS, setv, "gdn-tma-odd-pairs.json")
print("all done", flush=True)
