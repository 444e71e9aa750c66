"""Issue 14, call 236 (H200): is the program order the 1.1 us at 64 between call 235's "nomath" (one warp, 16 rows,
the odd row blocks after PDL's wait, the state in and back with nothing computed: 35.93 us) and the token floor in
that shape (34.80 us)? The slot copy's grid walks requests fastest; the TMA kernel's walks one request's rows, then
its heads. ``issue14-call236-gdn-tma-req-order.cu``: "nomath_req" / "nomath_tok_req" are call 235's "nomath" /
"nomath_tok" on the grid (requests, row blocks, heads). Their results are wrong on purpose (their agreement gate fails).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call236-gdn-tma-req-order.py
"""
import sys
from pathlib import Path

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import GDNCase  # noqa: E402
from mambalab.kernels import common  # noqa: E402
from mambalab.kernels import gated_delta_rule_packed as gdp  # noqa: E402
from mambalab.kernels import gated_delta_rule_tma as tma  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)


class Odd(tma.TmaShape):
    """Call 233's one-warp CTAs, the odd row blocks' state after PDL's wait."""
    __slots__ = ()

    @property
    def entry(self) -> str:
        return f"gdn_tma_r{self.rows}_w1_odd"


T = tma.TmaShape
REQ = {"nomath_req": T(16, 1, True, False, 1, 0, 85), "nomath_tok_req": T(16, 1, True, False, 1, 0, 86)}
DIAG = {"nomath": T(16, 1, True, False, 1, 0, 81), "nomath_tok": T(16, 1, True, False, 1, 0, 82), **REQ}
tma.SOURCE = Path(__file__).resolve().with_suffix(".cu")
tma.SHAPES = tma.SHAPES + (T(16, 1, True, False, 1), Odd(16, 1, True, False, 1, 0, -1), Odd(32, 1, True, False, 1, 0, -1),
                           T(16, 1, True, False, 1, 0, 83), T(16, 1, True, False, 1, 0, 84)) + tuple(DIAG.values())
SHAPES = {"base": None, **DIAG}
_launch = gdp.tma_launch


def req_launch(mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, out, idx, l2norm, null_block_id, shape, H,
               softplus_beta=1.0, threshold=20.0):
    if shape not in REQ.values():
        return _launch(mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, out, idx, l2norm, null_block_id,
                       shape, H, softplus_beta, threshold)
    N, HV = idx.shape[0], initial_state.shape[1]
    drv, dev = tma._get_driver(), mixed_qkv.device
    params = tma._Params(mixed_qkv.data_ptr(), a.data_ptr(), b.data_ptr(), A_log.data_ptr(), dt_bias.data_ptr(),
                         initial_state.data_ptr(), out.data_ptr(), idx.data_ptr(), mixed_qkv.stride(0), a.stride(0),
                         b.stride(0), H, HV, int(null_block_id), int(bool(l2norm)), float(scale),
                         float(softplus_beta), float(threshold))
    drv.launch(drv.function(dev, shape.entry), (N, tma.V // shape.rows, HV), 32, tma.shape_smem(shape),
               torch.cuda.current_stream(dev).cuda_stream, params, common.use_pdl(dev))


gdp.tma_launch = req_launch
dev = torch.device("cuda", torch.cuda.current_device())
drv = tma._get_driver()
for name, shape in DIAG.items():
    fn = drv.function(dev, shape.entry)
    print(f"{name}: {drv.blocks_per_sm(fn, 32, tma.shape_smem(shape))} CTAs an SM", flush=True)


def setv(v):
    tma.FORCE = SHAPES[v]


CASES = [(32, 32), (64, 64), (128, 128)]
Sweep("ab-gdn-tma-req-order").run_parts(parts("gdn"), CASES, tuple(SHAPES), setv,
                                        lambda k: GDNCase(k[0], k[1], D["bf16"], D["bf16"], True, "cloned", 1))
print("all done", flush=True)
