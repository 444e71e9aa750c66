"""Mamba2's one-token decode step as a CUDA kernel that stages the state through shared memory with the bulk-copy
engine (TMA), beside the Triton one (sm_90 and newer): the H200's SSU at small batches (:data:`RULES`), and a kernel
for kernel authors to study against the Triton one.

The same step and arguments as :func:`mambalab.kernels.mamba_ssm.selective_state_update` (vLLM 0.33's
``selective_state_update`` in ``vllm/model_executor/layers/mamba/ops/mamba_ssm.py``) where ``mamba_mixer2`` calls it
for a decode: one token a request, ``A``, ``dt``, ``dt_bias`` and ``D`` one a head, 1-D int32 slot indices, the state
stored back where it was read. The source and its design are in ``cuda/ssu_decode_tma.cu``. Not a mirror of an
upstream file: vLLM's decode kernels are Triton.

Why a second kernel: at a few requests the SSU is a latency-bound chain, and the Triton kernel's programs hold
their state in registers while they wait on the token. Here one lane's bulk copy brings a CTA's rows into shared
memory before PDL's wait, and the warp loads its token meanwhile. Measured on an H200 beside vLLM 0.33's kernel and
the Triton one, A/B interleaved with the agreement gate (``docs/results/issue14-call23{7,8}-*.txt``), vLLM's time over
ours; the bench (each launch after one of its own) / after a torch kernel that does not trigger PDL / as a layer runs
it (the conv, then the SSU):

* bf16 state, 16-row CTAs at 1-6 requests (of 128 heads): 1 1.472 / 0.925 / 1.343 -> 1.474 / 0.998 / 1.419x,
  4 1.122 / 0.949 / 1.263 -> 1.153 / 0.972 / 1.290x, 5 1.063 / 0.962 -> 1.211 / 1.078x; at 2 the bench loses
  (1.460 -> 1.407x) where the others win (0.954 / 1.327 -> 1.010 / 1.388x);
* bf16 state, 32-row CTAs at 7-12: 8 1.082 / 0.991 / 1.182 -> 1.104 / 1.032 / 1.229x, 9 1.070 / 0.996 / 1.168 ->
  1.082 / 1.034 / 1.208x, 12 1.047 / 0.987 / 1.133 -> 1.056 / 1.014 / 1.172x (in one copy; two, below); from 15 the
  Triton kernel leads;
* fp32 state, 16-row CTAs at 1: 1.284 / 1.201 (bench / layer) -> 1.323 / 1.315x. From 2 the bench loses 5-8% (2,
  fp32 activations: 1.211 -> 1.111x), and at 4 (1.078 -> 1.012x), so the Triton kernel keeps them.

The source keeps call 237's body, whose warp, piece and early-piece switches it measured. The entries are one warp with
every bulk copy before the wait: 16-row CTAs in one copy, 32-row CTAs in two of 16 rows, each counted by its own
barrier, so that the update starts when the first half is in (calls 246-247, ``docs/results/issue14-call24{6,7}-*.txt``:
bf16 9 1.085 -> 1.102x, 10 1.064 -> 1.079x, 12 1.049 -> 1.059x, 8 1.106 -> 1.112x in the bench, within 0.6% after a
torch kernel and as a layer runs it; two copies of the 16-row CTA and four of either lose, as do the 32 rows on two
warps). Without the switches the same step compiles to some 40% less code (the warp-collective fallback paths that
``__shfl_sync`` gets here sit after the exit), yet runs slower: call 239 measured it in the bench at 9 (1.028x, against
1.077-1.082x), and call 246 at 1 both in the bench (2.41 against 2.18 us) and after a torch kernel (3.61-3.62 against
3.48 us, two passes; call 239's 2.88 us there did not repeat); alone under Nsight Compute at 1 it takes 5.22 against
4.64 us with as many instructions, its warps stalled twice as long on global loads (Nsight's long-scoreboard stall ratio
3.52 against 1.79): its SASS issues the token's last 16-byte load (C's second run) after the softplus of dt, which waits
on dt's load, so the token costs two round trips in a row. The PTX pieces shared with the GDN's kernel live in
``cuda/tma_ptx.cuh`` (both kernels compile to the same SASS with it).

The kernel is built with ``nvcc`` at first use and launched through the CUDA driver API
(:mod:`~mambalab.kernels.cuda_driver`, with PDL where :func:`~mambalab.kernels.common.use_pdl` allows it), so it
runs inside CUDA graphs as the Triton kernels do. The CPU interpreter cannot run it; without a GPU of compute
capability 9.0, or without ``nvcc``, :func:`available` says why and the Triton kernel runs instead. It has the fixed
guard only (``slot != null_block_id``: zero outputs, no state traffic); a planted pre-fix guard runs the Triton one.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from mambalab.constants import NULL_BLOCK_ID
from mambalab.kernels import cuda_driver
from mambalab.kernels.common import device_name, use_pdl
from mambalab.lab.bugs import GuardMode

SOURCE = Path(__file__).with_name("cuda") / "ssu_decode_tma.cu"
DSTATE = 128  # the kernel's state width (NemotronH's, Mamba2's usual)
ROWS = (16, 32)  # head-dim rows a one-warp CTA, the source's instantiations
_TAG = {torch.bfloat16: "b", torch.float32: "f"}

# device name -> {state element size: ((fewest, most request x heads, rows a CTA), ...)}: where this kernel replaces
# the Triton one (calls 237-238 on the H200, above; no other card measured).
RULES: dict[str, dict[int, tuple[tuple[int, int, int], ...]]] = {
    "NVIDIA H200": {2: ((1, 6 * 128, 16), (7 * 128, 12 * 128, 32)), 4: ((1, 128, 16),)}}
# An A/B switch: rows a CTA forces this kernel on every call it can take (None: RULES decide).
FORCE: int | None = None


def entry(state_dtype: torch.dtype, act_dtype: torch.dtype, rows: int, has_z: bool) -> str:
    """The source's entry point for a launch: ``ssu_tma_<state><activations>_r<rows>_z<0|1>``."""
    return f"ssu_tma_{_TAG[state_dtype]}{_TAG[act_dtype]}_r{rows}_z{int(has_z)}"


ENTRIES = tuple(entry(s, a, r, z) for s in _TAG for a in _TAG for r in ROWS for z in (False, True))


def available(device: torch.device) -> tuple[bool, str]:
    """``(True, "")`` where the kernel can run on ``device``, else ``(False, why)``."""
    return cuda_driver.available(device, "the SSU's TMA kernel")


def build(arch: str = "sm_90a") -> Path:
    """The cubin of :data:`SOURCE` for ``arch``, compiled once and cached by the source's and nvcc's hash."""
    return cuda_driver.build(SOURCE, arch)


class _Params(ctypes.Structure):
    """``SsuTmaParams`` of the source, field for field."""

    _fields_ = ([(f, ctypes.c_void_p) for f in "x dt B C z A dt_bias D state out idx".split()]
                + [(f, ctypes.c_longlong) for f in (
                    "s_state_slot s_state_head s_x_tok s_x_head s_dt_tok s_dt_head s_B_tok s_B_group s_C_tok "
                    "s_C_group s_z_tok s_z_head s_out_tok s_out_head s_A_head s_dtb_head s_D_head").split()]
                + [(f, ctypes.c_int) for f in "heads_per_group null_block_id dt_softplus has_dt_bias has_D".split()])


def _smem(name: str) -> int:
    """Dynamic shared memory of an entry: its CTA's rows of 128 state elements."""
    rows = int(name.split("_r")[1].split("_")[0])
    return rows * DSTATE * (2 if name.startswith("ssu_tma_b") else 4)


_driver: cuda_driver.Driver | None = None


def _get_driver() -> cuda_driver.Driver:
    global _driver
    if _driver is None:
        _driver = cuda_driver.Driver(lambda arch: build(arch), lambda: {e: _smem(e) for e in ENTRIES})
    return _driver


def check_inputs(p, tied: bool, one_token: bool) -> None:
    """What the kernel takes beyond ``selective_state_update``'s own checks, on its canonical form ``p`` (a
    :class:`~mambalab.kernels.mamba_ssm_ref.SSUProblem`): ``ValueError`` naming the argument."""
    def need(cond: bool, msg: str) -> None:
        if not cond:
            raise ValueError(f"the SSU's TMA kernel takes {msg}")

    need(one_token and tied, "one token a request with A, dt and dt_bias one a head (mamba_mixer2's decode call)")
    need(p.state.dtype in _TAG and p.x.dtype in _TAG, f"a bf16 or fp32 state and activations, got "
         f"{p.state.dtype} and {p.x.dtype}")
    need(p.dt.dtype == p.x.dtype, f"dt in the activations' dtype {p.x.dtype}, got {p.dt.dtype}")
    for name, t in (("A", p.A), ("D", p.D), ("dt_bias", p.dt_bias)):
        need(t is None or t.dtype == torch.float32, f"{name} as torch.float32, got {t.dtype if t is not None else ''}")
    need(p.D is None or p.D.stride(1) == 0, "D one a head (stride 0 along dim)")
    need(p.dstate == DSTATE, f"dstate {DSTATE}, got {p.dstate}")
    need(p.state.stride(3) == 1 and p.state.stride(2) == DSTATE, f"state rows contiguous (strides (.., .., "
         f"{DSTATE}, 1)), got {p.state.stride()}")
    esize, asize = p.state.element_size(), p.x.element_size()
    need(p.state.data_ptr() % 16 == 0 and (p.state.stride(0) * esize) % 16 == 0
         and (p.state.stride(1) * esize) % 16 == 0, "a 16-byte aligned state pool, slots and heads")
    for name, t in (("B", p.B), ("C", p.C)):
        need(t.stride(2) == 1 and t.data_ptr() % 16 == 0 and (t.stride(0) * asize) % 16 == 0
             and (t.stride(1) * asize) % 16 == 0, f"{name} in 16-byte aligned rows with a unit stride along dstate")
    for name, t in (("x", p.x), ("z", p.z), ("out", p.out)):
        need(t is None or t.stride(2) == 1, f"{name} with a unit stride along dim")
    need(p.src is not None and p.dst is p.src and p.src.dtype == torch.int32 and p.src.shape[1] == 1
         and p.src.stride(0) == 1, "1-D contiguous int32 state_batch_indices, the state stored where it was read")
    need(p.dim % ROWS[0] == 0, f"dim a multiple of {ROWS[0]}, got {p.dim}")
    need(p.num_requests <= 65535 and p.nheads <= 65535, "at most 65535 requests and heads (a grid axis each)")


def launch_rule(device: torch.device, state_size: int, request_heads: int) -> int | None:
    """Rows a CTA where the SSU runs on this kernel (:data:`FORCE`, else :data:`RULES`) for a state of
    ``state_size`` bytes an element and ``request_heads`` requests x heads on ``device``; None: the Triton kernel."""
    if FORCE is not None:
        return FORCE
    for lo, hi, rows in RULES.get(device_name(device) or "", {}).get(state_size, ()):
        if lo <= request_heads <= hi:
            return rows
    return None


def routed_rows(p, guard: int, tied: bool, one_token: bool, early_state_load: bool) -> int | None:
    """Rows a CTA where ``selective_state_update`` hands the call ``p`` to this kernel (:func:`launch_rule`), or
    None where the rule says the Triton kernel, or where this kernel cannot take it: a planted pre-fix guard (the
    kernel has the fixed one only), no early_state_load promise (it reads the state before PDL's wait), no GPU /
    nvcc for it, or inputs it does not take (:func:`check_inputs`)."""
    device = p.state.device
    if device.type != "cuda" or not one_token or not tied or not early_state_load:
        return None
    rows = launch_rule(device, p.state.element_size(), p.num_requests * p.nheads)
    if rows is None or guard != int(GuardMode.EQ_NULL) or not available(device)[0]:
        return None
    if rows not in ROWS:
        raise ValueError(f"rows must be one of mamba_ssm_tma.ROWS {ROWS}, got {rows}")
    try:
        check_inputs(p, tied, one_token)
    except ValueError:
        return None
    if p.dim % rows:
        return None
    return rows if loadable(device, entry(p.state.dtype, p.x.dtype, rows, p.z is not None)) else None


def launch(p, rows: int, dt_softplus: bool, null_block_id: int = NULL_BLOCK_ID) -> torch.Tensor:
    """The launch alone, on inputs already checked (:func:`check_inputs`, by :func:`routed_rows` or
    :func:`ssu_decode_tma`); returns ``p.finish()``."""
    if p.num_requests == 0:
        return p.finish()
    device = p.state.device
    name = entry(p.state.dtype, p.x.dtype, rows, p.z is not None)
    fn = _get_driver().function(device, name)
    z = p.z if p.z is not None else p.x
    zero = (0, 0)
    dtb_s, D_s = (t.stride() if t is not None else zero for t in (p.dt_bias, p.D))
    params = _Params(p.x.data_ptr(), p.dt.data_ptr(), p.B.data_ptr(), p.C.data_ptr(), z.data_ptr(),
                     p.A.data_ptr(), p.dt_bias.data_ptr() if p.dt_bias is not None else 0,
                     p.D.data_ptr() if p.D is not None else 0, p.state.data_ptr(), p.out.data_ptr(), p.src.data_ptr(),
                     p.state.stride(0), p.state.stride(1), p.x.stride(0), p.x.stride(1), p.dt.stride(0),
                     p.dt.stride(1), p.B.stride(0), p.B.stride(1), p.C.stride(0), p.C.stride(1), z.stride(0),
                     z.stride(1), p.out.stride(0), p.out.stride(1), p.A.stride(0), dtb_s[0], D_s[0],
                     p.nheads // p.ngroups, int(null_block_id), int(bool(dt_softplus)), int(p.dt_bias is not None),
                     int(p.D is not None))
    stream = torch.cuda.current_stream(device).cuda_stream
    _get_driver().launch(fn, (p.dim // rows, p.nheads, p.num_requests), 32, _smem(name), stream, params,
                         use_pdl(device))
    return p.finish()


def ssu_decode_tma(state, x, dt, A, B, C, D=None, dt_bias=None, z=None, dt_softplus=False,
                   state_batch_indices=None, null_block_id=NULL_BLOCK_ID, out=None, *, rows: int = 32) -> torch.Tensor:
    """One decode step of N requests on the TMA kernel, in place on the pool: ``selective_state_update``'s
    arguments where ``mamba_mixer2`` calls it for a decode (see :func:`check_inputs`), ``rows`` one of :data:`ROWS`.
    The fixed guard only; reads the state before PDL's wait (the ``early_state_load`` promise). Returns ``out``."""
    from mambalab.kernels.mamba_ssm_ref import is_tied, prepare_ssu_inputs

    ok, why = available(state.device)
    if not ok:
        raise RuntimeError(why)
    if rows not in ROWS:
        raise ValueError(f"rows must be one of mamba_ssm_tma.ROWS {ROWS}, got {rows}")
    p = prepare_ssu_inputs(state, x, dt, A, B, C, D, dt_bias, z, dt_softplus, state_batch_indices, None,
                           null_block_id, out, None, None)
    check_inputs(p, is_tied(p.A, p.dt, p.dt_bias), p.tokens_per_request == 1)
    if p.dim % rows:
        raise ValueError(f"the SSU's TMA kernel takes dim a multiple of rows={rows}, got {p.dim}")
    return launch(p, rows, dt_softplus, null_block_id)


_UNLOADABLE: dict[int, str] = {}  # device index -> why the kernel could not be built or loaded there


def loadable(device: torch.device, name: str) -> bool:
    """Whether the kernel is built and loaded on ``device`` (:func:`~mambalab.kernels.cuda_driver.loadable`: a
    failure is warned about once and the device left to the Triton kernel)."""
    return cuda_driver.loadable(_get_driver(), _UNLOADABLE, device, name, "the SSU's TMA kernel")


__all__ = ["ssu_decode_tma", "launch", "routed_rows", "launch_rule", "check_inputs", "available", "build",
           "loadable", "entry", "ENTRIES", "ROWS", "RULES", "FORCE"]
