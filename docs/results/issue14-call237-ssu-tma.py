"""Issue 14, call 237 (H200): the Mamba2 SSU's one-token decode on a CUDA kernel with TMA bulk copies
(``issue14-call237-ssu-tma.cu``), beside the tree (the Triton kernel) and vLLM 0.33's: bf16 and fp32 state, the
rows the recording leaves under 1.1x (bf16 8 / 9 / 16, fp32 4) and behind after a torch kernel (batch 1-9).
Shapes: "rR" one-warp CTAs of R head-dim rows, all state read before PDL's wait; "r64w2" 64 rows on two warps;
"r32h" 32 rows in two bulk copies, the second after the wait. Before timing: each shape against the torch
reference (mamba_ssm_ref) on fresh inputs with null rows (outputs poisoned, untouched slots bit-identical), then
the A/B's agreement gate. Bench, after a torch kernel ("-nb"), and as a layer runs it (the conv, then the SSU).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call237-ssu-tma.py
"""
import ctypes
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import Sweep, pair_sweep, parts  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import ConvCase, SSUCase  # noqa: E402
from mambalab.kernels import gated_delta_rule_tma as tma  # noqa: E402
from mambalab.kernels import mamba_ssm as ms  # noqa: E402
from mambalab.kernels.common import use_pdl  # noqa: E402
from mambalab.kernels.mamba_ssm_ref import selective_state_update_ref  # noqa: E402
from mambalab.kernels.testing import poison_  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
SRC = Path(__file__).resolve().with_suffix(".cu")
CUBIN = Path(tempfile.gettempdir()) / "ssu_tma.cubin"
subprocess.run([tma._nvcc(), "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-std=c++17", "-o", str(CUBIN),
                str(SRC)], check=True)


class Params(ctypes.Structure):
    """``SsuTmaParams`` of the source, field for field."""
    _fields_ = ([(f, ctypes.c_void_p) for f in "x dt B C z A dt_bias D state out idx".split()]
                + [(f, ctypes.c_longlong) for f in ("s_state_slot s_state_head s_x_tok s_x_head s_dt_tok s_dt_head "
                                                    "s_B_tok s_B_group s_C_tok s_C_group s_z_tok s_z_head "
                                                    "s_out_tok s_out_head s_A_head s_dtb_head s_D_head").split()]
                + [(f, ctypes.c_int) for f in "heads_per_group null_block_id dt_softplus has_dt_bias has_D".split()])


drv = tma._get_driver()
dev = torch.device("cuda", torch.cuda.current_device())
drv.make_current(dev.index)
module = ctypes.c_void_p()
drv.check(drv.lib.cuModuleLoadData(ctypes.byref(module), CUBIN.read_bytes()), "cuModuleLoadData")
_fns = {}

# name -> (rows a CTA, warps, pieces, pieces before the wait)
SHAPES = {"r32": (32, 1, 1, 1), "r16": (16, 1, 1, 1), "r8": (8, 1, 1, 1), "r64w2": (64, 2, 1, 1),
          "r32h": (32, 1, 2, 1)}
TAG = {torch.bfloat16: "b", torch.float32: "f"}


def fn(state, x, z, shape):
    rows, warps, pieces, ep = SHAPES[shape]
    name = f"ssu_tma_{TAG[state.dtype]}{TAG[x.dtype]}_r{rows}_w{warps}_z{int(z is not None)}_p{pieces}_ep{ep}"
    if name not in _fns:
        f = ctypes.c_void_p()
        drv.check(drv.lib.cuModuleGetFunction(ctypes.byref(f), module, name.encode()), name)
        _fns[name] = f
    return _fns[name], rows, warps


def ssu_tma(shape, state, x, dt, A, B, C, D_, dt_bias, z, dt_softplus, idx, out, null_block_id=0):
    Nr, nh, hd = x.shape
    assert state.shape[-1] == 128 and state.stride(-1) == 1 and state.stride(-2) == 128 and hd % 32 == 0
    assert x.stride(-1) == 1 and out.stride(-1) == 1 and B.stride(-1) == 1 and C.stride(-1) == 1
    assert idx.dtype == torch.int32 and idx.dim() == 1 and idx.is_contiguous()
    f, rows, warps = fn(state, x, z, shape)
    zz = z if z is not None else x
    p = Params(x.data_ptr(), dt.data_ptr(), B.data_ptr(), C.data_ptr(), zz.data_ptr(), A.data_ptr(),
               dt_bias.data_ptr() if dt_bias is not None else 0, D_.data_ptr() if D_ is not None else 0,
               state.data_ptr(), out.data_ptr(), idx.data_ptr(),
               state.stride(0), state.stride(1), x.stride(0), x.stride(1), dt.stride(0), dt.stride(1),
               B.stride(0), B.stride(1), C.stride(0), C.stride(1), zz.stride(0), zz.stride(1),
               out.stride(0), out.stride(1), A.stride(0), dt_bias.stride(0) if dt_bias is not None else 0,
               D_.stride(0) if D_ is not None else 0,
               nh // B.shape[1], null_block_id, int(dt_softplus), int(dt_bias is not None), int(D_ is not None))
    smem = rows * 128 * state.element_size()
    stream = torch.cuda.current_stream(dev).cuda_stream
    drv.launch(f, (hd // rows, nh, Nr), 32 * warps, smem, stream, p, use_pdl(dev))
    return out


FORCE = [None]
_orig = ms.selective_state_update


def patched(state, x, dt, A, B, C, D=None, dt_bias=None, z=None, dt_softplus=False, state_batch_indices=None,
            out=None, bugs=None, early_state_load=False, **kw):
    if FORCE[0] is None or kw or state.dtype not in TAG or x.dtype not in TAG:
        return _orig(state, x, dt, A, B, C, D, dt_bias=dt_bias, z=z, dt_softplus=dt_softplus,
                     state_batch_indices=state_batch_indices, out=out, bugs=bugs, early_state_load=early_state_load,
                     **kw)
    return ssu_tma(FORCE[0], state, x, dt, A, B, C, D, dt_bias, z, dt_softplus, state_batch_indices, out)


ms.selective_state_update = patched


def check(shape, state_dt, act, z, active, captured):
    case = SSUCase(active, captured, state_dt, act, z, "fresh", 1)
    pool = case.new_pool()
    before, pool_ref = pool.clone(), pool.clone()
    out = poison_(torch.empty_like(case.x))
    out_ref = torch.empty_like(case.x)
    FORCE[0] = shape
    patched(pool, case.x, case.dt, case.A, case.B, case.C, case.D, dt_bias=case.dt_bias, z=case.z,
            dt_softplus=True, state_batch_indices=case.idx, out=out, early_state_load=True)
    FORCE[0] = None
    selective_state_update_ref(pool_ref, case.x, case.dt, case.A, case.B, case.C, case.D, dt_bias=case.dt_bias,
                               z=case.z, dt_softplus=True, state_batch_indices=case.idx, out=out_ref)
    torch.cuda.synchronize()
    live = (case.idx != 0).cpu()
    touched = torch.zeros(pool.shape[0], dtype=torch.bool)
    touched[case.idx.cpu()[live].long()] = True
    ok = (torch.equal(out[~live.to(out.device)], torch.zeros_like(out[~live.to(out.device)]))
          and torch.equal(pool[~touched], before[~touched]))
    do = (out[live].float() - out_ref[live].float()).abs().max().item()
    ds = (pool.float() - pool_ref.float()).abs().max().item()
    return do, ds, ok


for s_dt, a_dt, zs in ((D["bf16"], D["bf16"], (False, True)), (D["fp32"], D["bf16"], (False, True)),
                       (D["fp32"], D["fp32"], (False,))):
    for z in zs:
        for shape in SHAPES:
            for active, captured in ((1, 1), (7, 9), (64, 64)):
                do, ds, ok = check(shape, s_dt, a_dt, z, active, captured)
                print(f"check {TAG[s_dt]}{TAG[a_dt]} z={int(z)} {shape} {active}->{captured}: out {do:.2e} "
                      f"state {ds:.2e} untouched+null rows {'ok' if ok else 'BAD'}", flush=True)


def setv(v):
    FORCE[0] = None if v == "base" else v


PARTS = parts("bf16,bf16-nb,fp32,fp32-nb,pairs")
BF = [(1, 1), (2, 2), (4, 4), (8, 8), (9, 9), (16, 16), (9, 16), (32, 32)]
FP = [(1, 1), (2, 2), (4, 4), (8, 8), (9, 9), (16, 16), (9, 16)]
sw = Sweep("ab-ssu-tma")
for part in PARTS:
    if part.startswith("bf16"):
        sw.run_parts([part], BF, ("base", "r32", "r16", "r64w2", "r32h"), setv,
                     lambda k: SSUCase(k[0], k[1], D["bf16"], D["bf16"], False, "cloned", 1))
    elif part.startswith("fp32"):
        sw.run_parts([part], FP, ("base", "r8", "r16", "r32", "r32h"), setv,
                     lambda k: SSUCase(k[0], k[1], D["fp32"], D["bf16"], False, "cloned", 1))
    elif part.startswith("z"):
        sw.run_parts([part], [(1, 1), (8, 8)], ("base", "r32", "r16"), setv,
                     lambda k: SSUCase(k[0], k[1], D["bf16"], D["bf16"], True, "cloned", 1))
if "pairs" in PARTS:
    for st, vs in ((D["bf16"], ("base", "r32", "r16")), (D["fp32"], ("base", "r8", "r16"))):
        pair_sweep(f"conv+ssu {TAG[st]}b", ((1, 1), (4, 4), (8, 8), (16, 16)),
                   lambda a, c, st=st: (ConvCase(a, c, D["bf16"], D["bf16"], True, "cloned", 1),
                                        SSUCase(a, c, st, D["bf16"], False, "cloned", 1)),
                   vs, setv, f"ssu-tma-pairs-{TAG[st]}.json")
print("all done", flush=True)
