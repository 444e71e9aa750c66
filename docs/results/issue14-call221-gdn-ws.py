"""Issue 14, call 221 (H200): the GDN bf16 packed decode on a warp-specialised persistent kernel
(``issue14-call221-gdn-ws.cu``): a producer warp keeps a ring of 8 KiB state buffers filled by bulk copies while
consumer warps take the items (32 rows of one request and head) in turn, each loading the next item's token before
it works on the current one; as call 220, with 8-24 consumer warps an SM (call 220's 4-8 were behind the Triton
kernel after a torch kernel from 32 requests). Call 219 ran two shapes whose buffers pass between consumers (4 / 6,
8 / 12): wrong at 257 requests and a hang in the bench; the .cu now refuses them. "wsC_S_D": C consumer warps, S
buffers, D of them first filled after PDL's wait. "base" is the tree (the Triton kernel from 17 requests, r32w1 from
4 to 16). Before timing: every variant against the torch reference on fresh inputs with null slots (outputs
poisoned), then the A/B's agreement gate. Bench, after a torch kernel ("-nb"), and as a layer runs it (the conv,
then the GDN).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call221-gdn-ws.py
"""
import ctypes
import sys
from pathlib import Path

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, GDNCase  # noqa: E402
from mambalab.kernels import common  # noqa: E402
from mambalab.kernels import gated_delta_rule_packed as gdp  # noqa: E402
from mambalab.kernels import gated_delta_rule_tma as tma  # noqa: E402
from mambalab.kernels.testing import poison_  # noqa: E402

sys.path.append("tests")
from test_kernel_gated_delta_rule import _gen, make_pool  # noqa: E402
from test_kernel_gdn_packed import _packed  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)


class Ws(tma.TmaShape):
    """A warp-specialised launch: ``warps`` = consumers + 1, ``persist`` = buffers, ``early_pieces`` = deferred."""
    __slots__ = ()

    @property
    def entry(self) -> str:
        return f"gdn_ws_c{self.warps - 1}_s{self.persist}_d{self.early_pieces}"


def ws(c, s, d=0):
    return Ws(32, c + 1, True, False, 1, s, d)


WS = {f"ws{c}_{s}_{d}": ws(c, s, d) for c, s, d in ((8, 24, 0), (16, 16, 0), (16, 16, 4), (12, 24, 0), (24, 24, 0),
                                                      (24, 24, 6), (20, 20, 0))}
tma.SOURCE = Path(__file__).resolve().with_suffix(".cu")
tma.SHAPES = tma.SHAPES + tuple(WS.values())
_smem = tma.shape_smem
tma.shape_smem = lambda s: s.persist * 32 * tma.K * 2 if isinstance(s, Ws) else _smem(s)
_launch = gdp.tma_launch
GRID = {}


def ws_launch(mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, out, idx, l2norm, null_block_id, shape, H,
              softplus_beta=1.0, threshold=20.0):
    if not isinstance(shape, Ws):
        return _launch(mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, out, idx, l2norm, null_block_id,
                       shape, H, softplus_beta, threshold)
    N, HV = idx.shape[0], initial_state.shape[1]
    drv, dev = tma._get_driver(), mixed_qkv.device
    fn = drv.function(dev, shape.entry)
    smem = tma.shape_smem(shape)
    if shape not in GRID:
        sms = torch.cuda.get_device_properties(dev).multi_processor_count
        GRID[shape] = sms * drv.blocks_per_sm(fn, 32 * shape.warps, smem)
    params = tma._Params(mixed_qkv.data_ptr(), a.data_ptr(), b.data_ptr(), A_log.data_ptr(), dt_bias.data_ptr(),
                         initial_state.data_ptr(), out.data_ptr(), idx.data_ptr(), mixed_qkv.stride(0), a.stride(0),
                         b.stride(0), H, HV, int(null_block_id), int(bool(l2norm)), float(scale),
                         float(softplus_beta), float(threshold))
    items = N * HV * (tma.V // 32)
    drv.launch(fn, (min(items, GRID[shape]), 1, 1), 32 * shape.warps, smem,
               torch.cuda.current_stream(dev).cuda_stream, params, common.use_pdl(dev), (ctypes.c_int(items),))


gdp.tma_launch = ws_launch
dev = torch.device("cuda", torch.cuda.current_device())
drv = tma._get_driver()
for name, shape in WS.items():
    fn = drv.function(dev, shape.entry)
    print(f"{name}: {drv.blocks_per_sm(fn, 32 * shape.warps, tma.shape_smem(shape))} CTAs an SM", flush=True)


def check(shape, N, null_rows, seed, H=16, HV=32):
    """One call of ``shape`` (through the packed decode, forced) against its torch reference, as
    tests/test_kernel_gdn_tma.py checks the shipped shapes: fresh inputs with null rows, the output poisoned first;
    returns (max |out - ref|, max |pool - ref|, null rows zero and untouched slots bit-identical)."""
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


for name, shape in {"r32w1": tma.TmaShape(32, 1, True, False, 1), **WS}.items():
    for N, nulls in ((1, 0), (7, 2), (64, 5), (257, 20)):
        do, ds, ok = check(shape, N, nulls, 900 + N)
        print(f"check {name} N={N}: out {do:.2e} state {ds:.2e} untouched+null rows {'ok' if ok else 'BAD'}",
              flush=True)

SHAPES = {"base": None, **WS}


def setv(v):
    tma.FORCE = SHAPES[v]


VARIANTS = tuple(SHAPES)
CASES = [(16, 16), (32, 32), (64, 64), (128, 128), (256, 256)]
PARTS = parts("gdn,gdn-nb,pairs")
Sweep("ab-gdn-ws3").run_parts(PARTS, CASES, VARIANTS, setv,
                             lambda k: GDNCase(k[0], k[1], D["bf16"], D["bf16"], True, "cloned", 1))
if "pairs" in PARTS:
    pair_sweep("conv+gdn bf16", ((16, 16), (32, 32), (64, 64), (128, 128)),
               lambda a, c: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                             GDNCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1)),
               VARIANTS, setv, "gdn-ws3-pairs.json")
print("all done", flush=True)
