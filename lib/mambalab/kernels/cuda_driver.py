"""Building and launching mambalab's CUDA kernels (the ``cuda/`` sources): ``nvcc`` to a cubin cached by the
source's and the compiler's hash, then the CUDA driver API through ``ctypes`` (``cuModuleLoadData``,
``cuLaunchKernelEx`` with programmatic dependent launch), on the stream torch uses, so a launch is captured in a
CUDA graph as a Triton kernel's is. No extension module: nothing is compiled at install time.

Used by :mod:`mambalab.kernels.gated_delta_rule_tma` (the GDN packed decode) and
:mod:`mambalab.kernels.mamba_ssm_tma` (the SSU's one-token step). Not a mirror of an upstream file: vLLM's decode
kernels are Triton.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import warnings
from pathlib import Path
from typing import Callable

import torch


@functools.lru_cache(maxsize=None)
def nvcc() -> str | None:
    """The ``nvcc`` on PATH, under ``CUDA_HOME`` / ``CUDA_PATH``, or in ``/usr/local/cuda``; None if none."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / "nvcc").is_file():
            return str(Path(root) / "bin" / "nvcc")
    return None


def available(device: torch.device, what: str) -> tuple[bool, str]:
    """``(True, "")`` where a kernel of ``cuda/`` (named ``what`` in the reason) can run on ``device``, else
    ``(False, why)``: it needs a CUDA GPU of compute capability 9.0 or newer (bulk copies, PDL) and ``nvcc``."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return False, f"{what} needs a CUDA GPU (the CPU interpreter runs the Triton kernel)"
    major, minor = torch.cuda.get_device_capability(device)
    if major < 9:
        return False, f"{what} needs compute capability 9.0 or newer, this GPU has {major}.{minor}"
    if nvcc() is None:
        return False, f"{what} is built with nvcc, which is not on PATH, CUDA_HOME or /usr/local/cuda"
    return True, ""


def build(source: Path, arch: str = "sm_90a") -> Path:
    """The cubin of ``source`` for ``arch``, compiled once and cached (``$MAMBALAB_CACHE/cuda``, by default
    ``~/.cache/mambalab/cuda``) by the hash of the source, the ``.cuh`` headers beside it, and nvcc's version."""
    compiler = nvcc()
    if compiler is None:
        raise RuntimeError(f"{source.name} is built with nvcc, which is not on PATH, CUDA_HOME or /usr/local/cuda")
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=True).stdout
    headers = b"".join(h.read_bytes() for h in sorted(source.parent.glob("*.cuh")))
    digest = hashlib.sha256(source.read_bytes() + headers + arch.encode() + version.encode()).hexdigest()[:16]
    cache = Path(os.environ.get("MAMBALAB_CACHE", Path.home() / ".cache" / "mambalab")) / "cuda"
    out = cache / f"{source.stem}-{arch}-{digest}.cubin"
    if not out.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        number = arch.removeprefix("sm_")
        cmd = [compiler, "-cubin", f"-gencode=arch=compute_{number},code={arch}", "-O3", "-std=c++17", "-o",
               str(tmp), str(source)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"nvcc failed to build {source.name} for {arch}:\n{done.stderr}")
        tmp.replace(out)
    return out


def arch_of(index: int) -> str:
    """The ``nvcc`` target of GPU ``index``: ``sm_90a`` on a Hopper (its bulk-copy and PDL instructions), else
    the plain ``sm_XY``."""
    major, minor = torch.cuda.get_device_capability(index)
    return "sm_90a" if (major, minor) == (9, 0) else f"sm_{major}{minor}"


class _LaunchAttribute(ctypes.Structure):
    """``CUlaunchAttribute``: an id, then a 64-byte value union whose first member here is the int flag."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_int), ("value", ctypes.c_int), ("rest", ctypes.c_byte * 60)]


class _LaunchConfig(ctypes.Structure):
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
MAX_DYNAMIC_SHARED_SIZE_BYTES = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


class Driver:
    """The kernels of one source through the CUDA driver API: ``build(arch)`` gives its cubin, ``entries()`` its
    entry points with the dynamic shared memory each launches with (read when the module is first loaded on a
    GPU, so a study script may add entries before that)."""

    def __init__(self, build: Callable[[str], Path], entries: Callable[[], dict[str, int]]):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.build, self.entries = build, entries
        self.functions: dict[tuple[int, str], ctypes.c_void_p] = {}

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorString(rc, ctypes.byref(text))
            raise RuntimeError(f"{what} failed: CUDA error {rc} ({(text.value or b'?').decode()})")

    def function(self, device: torch.device, entry: str) -> ctypes.c_void_p:
        """Entry point ``entry`` on ``device``, the module built and loaded there at the first call."""
        index = device.index if device.index is not None else torch.cuda.current_device()
        key = (index, entry)
        if key not in self.functions:
            with torch.cuda.device(index):
                self.make_current(index)
                image = self.build(arch_of(index)).read_bytes()
                module = ctypes.c_void_p()
                self.check(self.lib.cuModuleLoadData(ctypes.byref(module), image), "cuModuleLoadData")
                for name, smem in self.entries().items():
                    fn = ctypes.c_void_p()
                    self.check(self.lib.cuModuleGetFunction(ctypes.byref(fn), module, name.encode()),
                               f"cuModuleGetFunction({name})")
                    self.check(self.lib.cuFuncSetAttribute(fn, MAX_DYNAMIC_SHARED_SIZE_BYTES, smem),
                               "cuFuncSetAttribute")
                    self.functions[(index, name)] = fn
        return self.functions[key]

    def make_current(self, index: int) -> None:
        """Torch's context for GPU ``index`` (the device's primary context) current on this thread."""
        torch.cuda.init()
        ctx = ctypes.c_void_p()
        self.check(self.lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        if not ctx.value:
            dev = ctypes.c_int()
            self.check(self.lib.cuDeviceGet(ctypes.byref(dev), index), "cuDeviceGet")
            self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
            self.check(self.lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")

    def blocks_per_sm(self, fn, block: int, smem: int) -> int:
        count = ctypes.c_int()
        self.check(self.lib.cuOccupancyMaxActiveBlocksPerMultiprocessor(ctypes.byref(count), fn, block, smem),
                   "cuOccupancyMaxActiveBlocksPerMultiprocessor")
        return count.value

    def launch(self, fn, grid, block: int, smem: int, stream: int, params: ctypes.Structure, pdl: bool,
               extra: tuple = ()) -> None:
        """``fn`` on ``grid`` x ``block`` threads, its parameter struct ``params`` (then ``extra``), on
        ``stream``, with programmatic dependent launch where ``pdl``."""
        attr = _LaunchAttribute(id=PROGRAMMATIC_STREAM_SERIALIZATION, value=1)
        config = _LaunchConfig(grid[0], grid[1], grid[2], block, 1, 1, smem, stream,
                               ctypes.pointer(attr) if pdl else None, 1 if pdl else 0)
        values = (params,) + tuple(extra)
        args = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
        self.check(self.lib.cuLaunchKernelEx(ctypes.byref(config), fn, args, None), "cuLaunchKernelEx")


def loadable(driver: Driver, unloadable: dict[int, str], device: torch.device, entry: str, what: str) -> bool:
    """Whether ``driver``'s kernels are built and loaded on ``device`` (building them at the first call). A failure
    (an ``nvcc`` that cannot target the GPU, a driver that refuses the cubin) is warned about once, naming ``what``,
    the device and the reason, and remembered in ``unloadable`` (device index -> why): the device is left to the
    Triton kernel from then on, rather than failing every decode step."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index in unloadable:
        return False
    try:
        driver.function(device, entry)
    except (RuntimeError, OSError) as err:
        unloadable[index] = str(err)
        warnings.warn(f"{what} could not be built or loaded on cuda:{index}, so the Triton kernel runs there "
                      f"instead: {err}", RuntimeWarning, stacklevel=4)
        return False
    return True


__all__ = ["nvcc", "available", "build", "arch_of", "Driver", "loadable"]
