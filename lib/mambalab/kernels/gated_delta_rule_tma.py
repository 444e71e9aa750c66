"""The GDN packed decode step as a CUDA kernel that stages the state through shared memory with the bulk-copy
engine (TMA), beside the Triton one (sm_90 and newer, bf16 state): the H200's decode kernel from 4 to 16 requests
(:data:`RULES`), and a kernel for kernel authors to study against the Triton one.

The same step and arguments as :func:`mambalab.kernels.gated_delta_rule_packed.fused_recurrent_gated_delta_rule_packed_decode`
(vLLM 0.33's ``fused_recurrent_gated_delta_rule_packed_decode`` in
``vllm/third_party/flash_linear_attention/ops/fused_recurrent.py``); the source and its design are in
``cuda/gdn_packed_decode_tma.cu``. Not a mirror of an upstream file: vLLM's decode kernels are Triton.

Why a second kernel: Triton's ``tl`` language picks the register layout and the load path itself; at batch 32-64
with a bf16 state the Triton kernel leaves some 6% of a plain copy's speed (``docs/benchmarks.md``, issue 14). This
one owns its shared memory and barriers: one bulk copy a warp (no registers hold bytes in flight), eight lanes a
row (three shuffle levels, not four), optionally a persistent grid with a ring of buffers (:class:`TmaShape`).

Measured on an H200 beside vLLM 0.33's packed decode and the Triton kernel, A/B interleaved with the agreement gate
(``docs/results/issue14-call20{5,6,7}-gdn-tma*.txt``), vLLM's time over ours, bf16 state and activations, with
programmatic dependent launch (calls 199-201 ran it without: the launch attribute was never set, see
``docs/benchmarks.md``). One-warp CTAs of 32 rows with plain stores are its best shape. From 4 to 16 requests it
leads the Triton kernel as a layer runs it (the conv first: 4 / 8 / 9 / 12 / 16 1.153 / 1.247 / 1.190 / 1.201 /
1.298 -> 1.168 / 1.352 / 1.322 / 1.279 / 1.338x) and after a torch kernel that does not trigger PDL (0.935-1.082 ->
1.002-1.123x); in the bench's back-to-back launches it is mixed there (4 / 12 / 9 -> 16 +4-11%, 8 / 9 / 16 -1 to -9%,
each of those rows still 1.1x or more: 1.126x at the least, 16 in call 206). From 32 on it is behind (32 / 64 1.069 / 1.045x against 1.095 / 1.053x), and
the persistent ring behind everywhere (as are, as a layer runs them, half a warp's rows read early and fewer CTAs an
SM: call 209). So on the H200 the packed decode runs it from 4 to 16 requests (:data:`RULES`); elsewhere the Triton
kernel.

The kernel is built with ``nvcc`` at first use (a few seconds; the cubin is cached under ``~/.cache/mambalab``)
and launched through the CUDA driver API (:mod:`~mambalab.kernels.cuda_driver`: ``cuLaunchKernelEx``, with PDL where
:func:`~mambalab.kernels.common.use_pdl` allows it), so it runs inside CUDA graphs as the Triton kernels do. The
CPU interpreter cannot run it; without a GPU of compute capability 9.0, or without ``nvcc``, :func:`available` says
why and the Triton kernel runs instead.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import NamedTuple

import torch

from mambalab.constants import NULL_BLOCK_ID
from mambalab.kernels import cuda_driver
from mambalab.kernels.common import KernelFamily, device_name, guard_for, use_pdl
from mambalab.lab.bugs import BugConfig, GuardMode

SOURCE = Path(__file__).with_name("cuda") / "gdn_packed_decode_tma.cu"
K = V = 128  # the kernel's head dims (Qwen3-Next's)


class TmaShape(NamedTuple):
    """A launch shape: value ``rows`` a CTA on ``warps`` warps (each warp ``rows / warps`` rows), the state read
    before PDL's wait (``early``), the new rows stored through shared memory by one bulk store a warp
    (``tma_store``), a warp's rows brought in by ``pieces`` bulk copies, each with its own mbarrier. ``persist`` > 0:
    the persistent kernel instead (one-warp CTAs, as many as fit the GPU, each walking 32-row items with a ring of
    ``persist`` buffers; the other fields are then 32, 1, True, False, 1)."""

    rows: int = 32
    warps: int = 1
    early: bool = True
    tma_store: bool = True
    pieces: int = 1
    persist: int = 0
    early_pieces: int = 0  # > 0 (with early): only this many of a warp's pieces before the wait, the rest after

    @property
    def entry(self) -> str:
        if self.persist:
            return f"gdn_tma_persist_s{self.persist}"
        name = f"gdn_tma_r{self.rows}_w{self.warps}_e{int(self.early)}_s{int(self.tma_store)}_p{self.pieces}"
        return name + (f"_ep{self.early_pieces}" if self.early_pieces else "")


# The shapes the source instantiates (GDN_TMA_ENTRY at its end).
SHAPES = tuple(TmaShape(*args) for args in (
    (32, 1, True, False, 1), (32, 1, True, True, 1), (32, 1, True, True, 8), (32, 1, True, False, 8),
    (64, 2, True, True, 1), (64, 2, True, True, 4), (128, 4, True, True, 1), (128, 8, True, True, 1),
    (128, 8, True, False, 1), (128, 4, False, True, 1), (32, 1, True, False, 1, 2), (32, 1, True, False, 1, 3),
    (32, 1, True, False, 2, 0, 1), (32, 1, True, False, 4, 0, 2)))

# device name -> (fewest, most sequences, shape): where this kernel replaces the Triton one in the packed decode (calls
# 206-207 on the H200, above; no other card measured).
RULES: dict[str, tuple[int, int, TmaShape]] = {"NVIDIA H200": (4, 16, TmaShape(32, 1, True, False, 1))}
# An A/B switch: a shape forces this kernel on every call it can take (None: RULES decide).
FORCE: TmaShape | None = None


_nvcc = cuda_driver.nvcc  # the name calls 237-238's record scripts (docs/results) call it by


def available(device: torch.device) -> tuple[bool, str]:
    """``(True, "")`` where the kernel can run on ``device``, else ``(False, why)``."""
    return cuda_driver.available(device, "the TMA kernel")


def build(arch: str = "sm_90a") -> Path:
    """The cubin of :data:`SOURCE` for ``arch``, compiled once and cached by the source's and nvcc's hash."""
    return cuda_driver.build(SOURCE, arch)


class _Params(ctypes.Structure):
    """``GdnTmaParams`` of the source, field for field."""

    _fields_ = [("mixed", ctypes.c_void_p), ("a", ctypes.c_void_p), ("b", ctypes.c_void_p),
                ("A_log", ctypes.c_void_p), ("dt_bias", ctypes.c_void_p), ("state", ctypes.c_void_p),
                ("out", ctypes.c_void_p), ("idx", ctypes.c_void_p),
                ("s_mixed", ctypes.c_longlong), ("s_a", ctypes.c_longlong), ("s_b", ctypes.c_longlong),
                ("H", ctypes.c_int), ("HV", ctypes.c_int), ("null_block_id", ctypes.c_int),
                ("use_l2norm", ctypes.c_int),
                ("scale", ctypes.c_float), ("softplus_beta", ctypes.c_float), ("softplus_threshold", ctypes.c_float)]


_driver: cuda_driver.Driver | None = None
_SM_COUNT: dict[int, int] = {}  # a function -> the CTAs of its persistent grid (resident ones, all SMs)


def shape_smem(shape: TmaShape) -> int:
    """Dynamic shared memory of a launch: the CTA's rows, or the persistent kernel's ring of 32-row buffers."""
    return shape.persist * 32 * K * 2 if shape.persist else shape.rows * K * 2


def _get_driver() -> cuda_driver.Driver:
    global _driver
    if _driver is None:  # SOURCE, SHAPES and shape_smem read when the module is loaded (study scripts extend them)
        _driver = cuda_driver.Driver(lambda arch: build(arch), lambda: {s.entry: shape_smem(s) for s in SHAPES})
    return _driver


def check_inputs(mixed_qkv, a, b, A_log, dt_bias, initial_state, out, ssm_state_indices) -> None:
    """What the kernel takes beyond the packed decode's own checks (``ValueError`` naming the argument)."""
    for name, t, dtype in (("mixed_qkv", mixed_qkv, torch.bfloat16), ("a", a, torch.bfloat16),
                           ("b", b, torch.bfloat16), ("initial_state", initial_state, torch.bfloat16),
                           ("out", out, torch.bfloat16), ("A_log", A_log, torch.float32),
                           ("dt_bias", dt_bias, torch.float32), ("ssm_state_indices", ssm_state_indices, torch.int32)):
        if t.dtype != dtype:
            raise ValueError(f"the TMA kernel takes {name} as {dtype}, got {t.dtype}")
    if tuple(initial_state.shape[-2:]) != (V, K) or not initial_state.is_contiguous():
        raise ValueError(f"the TMA kernel takes a contiguous [slots, HV, {V}, {K}] state, got "
                         f"{tuple(initial_state.shape)} with strides {initial_state.stride()}")
    if mixed_qkv.data_ptr() % 16 or mixed_qkv.stride(0) % 8:
        raise ValueError("the TMA kernel reads mixed_qkv in 16-byte pieces: its base must be 16-byte aligned and "
                         f"its row stride a multiple of 8 elements, got stride {mixed_qkv.stride(0)}")
    if initial_state.data_ptr() % 16:
        raise ValueError("the TMA kernel's bulk copies need a 16-byte aligned state pool")
    for name, t in (("a", a), ("b", b)):
        if t.stride(-1) != 1:
            raise ValueError(f"the TMA kernel takes {name} with a unit stride along HV, got {t.stride()}")
    for name, t in (("A_log", A_log), ("dt_bias", dt_bias), ("ssm_state_indices", ssm_state_indices)):
        if not t.is_contiguous():
            raise ValueError(f"the TMA kernel takes {name} contiguous")


def gdn_packed_decode_tma(
    mixed_qkv: torch.Tensor, a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor,
    scale: float, initial_state: torch.Tensor, out: torch.Tensor, ssm_state_indices: torch.Tensor,
    use_qk_l2norm_in_kernel: bool = False, *, null_block_id: int = NULL_BLOCK_ID, shape: TmaShape = TmaShape(),
    softplus_beta: float = 1.0, threshold: float = 20.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One decode step of N requests on the TMA kernel, in place on the pool; the packed decode's arguments.

    ``shape`` is one of :data:`SHAPES`. The fixed guard only (a slot at or below ``null_block_id`` is skipped);
    bf16 state, activations and output, fp32 ``A_log`` / ``dt_bias``, int32 indices. Returns
    ``(out, initial_state)``."""
    from mambalab.kernels.gated_delta_rule_packed import _unpack

    ok, why = available(mixed_qkv.device)
    if not ok:
        raise RuntimeError(why)
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of gated_delta_rule_tma.SHAPES, got {shape}")
    q, _, _, _, _ = _unpack(mixed_qkv, a, b, A_log, dt_bias, initial_state, ssm_state_indices)
    N, H = q.shape[0], q.shape[2]
    HV = initial_state.shape[1]
    if not isinstance(out, torch.Tensor) or out.shape != (N, 1, HV, V) or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous [N, 1, HV, V] = [{N}, 1, {HV}, {V}] tensor")
    check_inputs(mixed_qkv, a, b, A_log, dt_bias, initial_state, out, ssm_state_indices)
    if N > 65535:
        raise ValueError(f"the TMA kernel launches a request a grid row, at most 65535, got {N}")
    launch(mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, out, ssm_state_indices, use_qk_l2norm_in_kernel,
           null_block_id, shape, H, softplus_beta, threshold)
    return out, initial_state


def launch(mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, out, ssm_state_indices, use_qk_l2norm_in_kernel,
           null_block_id: int, shape: TmaShape, H: int, softplus_beta: float = 1.0, threshold: float = 20.0) -> None:
    """The launch alone, on inputs already checked (:func:`gdn_packed_decode_tma`'s checks, or the packed decode's
    own with :func:`routed_shape`'s): ``H`` the key heads of ``mixed_qkv``."""
    N, HV = ssm_state_indices.shape[0], initial_state.shape[1]
    if N == 0:
        return
    driver = _get_driver()
    fn = driver.function(mixed_qkv.device, shape.entry)
    params = _Params(mixed_qkv.data_ptr(), a.data_ptr(), b.data_ptr(), A_log.data_ptr(), dt_bias.data_ptr(),
                     initial_state.data_ptr(), out.data_ptr(), ssm_state_indices.data_ptr(),
                     mixed_qkv.stride(0), a.stride(0), b.stride(0), H, HV, int(null_block_id),
                     int(bool(use_qk_l2norm_in_kernel)), float(scale), float(softplus_beta), float(threshold))
    stream = torch.cuda.current_stream(mixed_qkv.device).cuda_stream
    pdl = use_pdl(mixed_qkv.device)
    if shape.persist:
        items = N * HV * (V // 32)
        ctas = _SM_COUNT.get(fn.value)
        if ctas is None:
            sms = torch.cuda.get_device_properties(mixed_qkv.device).multi_processor_count
            ctas = _SM_COUNT[fn.value] = sms * driver.blocks_per_sm(fn, 32, shape_smem(shape))
        driver.launch(fn, (min(items, ctas), 1, 1), 32, shape_smem(shape), stream, params, pdl,
                      (ctypes.c_int(items),))
    else:
        driver.launch(fn, (V // shape.rows, HV, N), 32 * shape.warps, shape_smem(shape), stream, params, pdl)


def launch_rule(device: torch.device, num_sequences: int) -> TmaShape | None:
    """The shape the packed decode runs on this kernel for ``num_sequences`` on ``device`` (:data:`FORCE`, else
    :data:`RULES`), or None (the Triton kernel)."""
    if FORCE is not None:
        return FORCE
    rule = RULES.get(device_name(device) or "")
    return rule[2] if rule is not None and rule[0] <= num_sequences <= rule[1] else None


def routed_shape(mixed_qkv, a, b, A_log, dt_bias, initial_state, out, ssm_state_indices, bugs,
                 early_state_load: bool) -> TmaShape | None:
    """The shape the packed decode hands this call to (:func:`launch_rule`), or None where the rule says the Triton
    kernel, or where this kernel cannot take the call: a pre-fix guard planted (the kernel has the fixed one only),
    the early state load not promised to an early shape, no GPU / nvcc for it, or inputs it does not take."""
    device = mixed_qkv.device
    if device.type != "cuda":
        return None
    shape = launch_rule(device, ssm_state_indices.shape[0])
    if shape is not None and shape not in SHAPES:
        raise ValueError(f"shape must be one of gated_delta_rule_tma.SHAPES, got {shape}")
    if shape is None or (shape.early and not early_state_load) or not isinstance(bugs, (BugConfig, type(None))):
        return None
    if guard_for(bugs, KernelFamily.FLA) != GuardMode.NULL:
        return None
    if not available(device)[0] or ssm_state_indices.shape[0] > 65535:
        return None
    try:
        check_inputs(mixed_qkv, a, b, A_log, dt_bias, initial_state, out, ssm_state_indices)
    except ValueError:
        return None
    return shape if loadable(device, shape) else None


_UNLOADABLE: dict[int, str] = {}  # device index -> why the kernel could not be built or loaded there


def loadable(device: torch.device, shape: TmaShape) -> bool:
    """Whether the kernel is built and loaded on ``device`` (:func:`~mambalab.kernels.cuda_driver.loadable`: a
    failure is warned about once and the device left to the Triton kernel)."""
    return cuda_driver.loadable(_get_driver(), _UNLOADABLE, device, shape.entry, "the GDN's TMA kernel")


__all__ = ["gdn_packed_decode_tma", "launch", "available", "build", "launch_rule", "routed_shape", "loadable",
           "TmaShape", "SHAPES", "RULES", "FORCE"]
