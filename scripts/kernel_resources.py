#!/usr/bin/env python3
"""Compile the decode kernels for a Hopper GPU on a machine without one; print their resources.

    .venv/bin/python scripts/kernel_resources.py                 # registers, spills, SASS size
    .venv/bin/python scripts/kernel_resources.py --sass ssu-bf16 # and dump one kernel's SASS
    .venv/bin/python scripts/kernel_resources.py --batch 64 --cases ssu-bf16-element --ops ssu-bf16-element
    .venv/bin/python scripts/kernel_resources.py --device-name "NVIDIA H100 80GB HBM3" --cases gdn-bf16,gdn-fp32

Why: registers per thread set occupancy, and occupancy decided the kernels'
gaps (docs/benchmarks.md). ptxas reports them at compile time, so a kernel
change can be judged before any GPU time is spent. The script calls each
kernel's real wrapper on CPU tensors at the benchmark's shapes, as mambalab's
layers call it, with every launch rule answering as on a GPU (``as_gpu``:
otherwise the CPU tensors would pick the interpreter's kernels), catches the
launch (``mambalab.lab.sanitizer.launch``), and compiles it with the same
specialisation the JIT would use on the GPU (a stand-in driver that reports
``sm_90``), then runs the bundled ``ptxas -v`` / ``cuobjdump``. The local
Triton may differ from the GPU machine's: treat the numbers as a guide and
confirm with ``ncu`` there.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import inspect
import os
import re
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

os.environ["MAMBALAB_DEVICE"] = "cuda"
os.environ.pop("TRITON_INTERPRET", None)

import torch  # noqa: E402

torch.cuda.is_available = lambda: True  # only so mambalab.device picks the compiled path

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.runtime.driver import driver  # noqa: E402

warnings.filterwarnings("ignore", module="triton")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "lib"))


class _StandInDriver:
    """Just enough of a CUDA driver for ``JITFunction.run(..., warmup=True)``."""

    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_device_interface(self):
        return torch.cuda

    def get_active_torch_device(self):
        return torch.device("cpu")


def _nvidia_bin(tool: str) -> str:
    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / tool)


def _launch_only_keywords() -> tuple[str, ...]:
    from mambalab.lab import sanitizer

    return tuple(p.name for p in inspect.signature(sanitizer.launch).parameters.values() if p.kind is p.KEYWORD_ONLY)


@contextlib.contextmanager
def as_gpu(sms: int = 132, device_name: str | None = None):
    """The wrappers' launch decisions as on an sm_90 GPU of ``sms`` SMs, for CPU tensors: every rule that asks
    whether a tensor is on a GPU (tiles, streaming kernels, several requests a program, PDL) answers yes, so the
    caught launch is the one the GPU machine runs, not the interpreter's. ``device_name``: the card's name for the
    rules keyed by it (``gated_delta_rule_devices``, ``mamba_ssm_devices``); None: none of them (the H200's rules)."""
    from mambalab.kernels import causal_conv1d as conv_mod
    from mambalab.kernels import common as common_mod
    from mambalab.kernels import gated_delta_rule as gdn_mod
    from mambalab.kernels import gated_delta_rule_devices as gdn_devices
    from mambalab.kernels import mamba_ssm as ssu_mod
    from mambalab.kernels import mamba_ssm_devices as ssu_devices
    from mambalab.kernels import mamba_ssm_kernels as ssu_kernels

    cuda = torch.device("cuda", 0)
    rule = ssu_mod.choose_launch_config
    conv_rule, conv_decode, conv_window = conv_mod.decode_launch_config, conv_mod.decode_kernel, conv_mod.window_kernel
    patches = [
        (gdn_mod, "_num_sms", lambda device: sms),
        (gdn_mod, "_gpu_rules_on", lambda device: True),
        (gdn_mod, "heads_per_program", lambda HV, device: 1),
        (gdn_mod, "use_pdl", lambda device: True),
        (ssu_mod, "_gpu_rules_on", lambda device: True),
        (ssu_mod, "use_pdl", lambda device: True),
        (common_mod, "use_pdl", lambda device: True),  # the conv's, looked up at each launch
        (ssu_kernels, "fast_softplus_on", lambda device: ssu_kernels.FAST_SOFTPLUS),
        (ssu_mod, "choose_launch_config", lambda *a, **k: rule(*a[:5], cuda, **k)),
        (conv_mod, "decode_launch_config", lambda d, b, dt, dev: conv_rule(d, b, dt, cuda)),
        (conv_mod, "decode_kernel", lambda rows, device: conv_decode(rows, cuda)),
        (conv_mod, "window_kernel", lambda device: conv_window(cuda)),
        (gdn_devices, "device_name", lambda device: device_name),
        (ssu_devices, "device_name", lambda device: device_name),
    ]
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in patches]
    try:
        for mod, name, value in patches:
            setattr(mod, name, value)
        yield
    finally:
        for mod, name, value in saved:
            setattr(mod, name, value)


def capture(kernel_name: str, dtype: torch.dtype, batch: int, captured: int | None = None, variant: str = "",
            device_name: str | None = None):
    """Run the wrapper of ``kernel_name`` at the benchmark's shapes, called as mambalab's layers call it
    (``early_state_load``), under :func:`as_gpu`; return the caught launch. ``variant`` (the SSU's only): "element"
    (``A``/``dt`` per element, as vLLM's kernel tests pass them) or "specT" (speculative decoding, ``T`` tokens a
    request: 2-D indices, ``num_accepted_tokens``, ``cu_seqlens``, as the bench's speculative rows)."""
    from mambalab.gpu import bench
    from mambalab.lab import sanitizer
    from mambalab.kernels import gated_delta_rule as gdn_mod
    from mambalab.kernels import mamba_ssm as ssu_mod

    caught = {}
    keywords = _launch_only_keywords()

    def fake_launch(kernel, grid, *args, **kwargs):
        for name in keywords:  # the sanitizer's own keywords, not the kernel's
            kwargs.pop(name, None)
        caught.update(kernel=kernel, grid=grid, args=args, kwargs=kwargs)

    captured = captured or batch
    old_launch, sanitizer.launch = sanitizer.launch, fake_launch
    try:
        with as_gpu(device_name=device_name):
            idx = torch.zeros(captured, dtype=torch.int32)
            idx[:batch] = torch.arange(1, batch + 1, dtype=torch.int32)
            if kernel_name == "ssu":
                s = bench.SSU
                nh, hd, ds, ng = s["nheads"], s["headdim"], s["dstate"], s["ngroups"]
                T = int(variant[4:]) if variant.startswith("spec") else 1
                ntok = captured * T
                spec = {}
                if T > 1:
                    idx = (torch.arange(ntok, dtype=torch.int32) + 1).view(captured, T)
                    spec = dict(num_accepted_tokens=torch.ones(captured, dtype=torch.int32),
                                cu_seqlens=torch.arange(0, ntok + 1, T, dtype=torch.int32))
                state = torch.zeros(ntok + 1, nh, hd, ds, dtype=dtype)
                x = torch.zeros(ntok, nh, hd, dtype=dtype)
                B = torch.zeros(ntok, ng, ds, dtype=dtype)
                if variant == "element":
                    A, dtb, dt = torch.zeros(nh, hd, ds), torch.zeros(nh, hd), torch.zeros(ntok, nh, hd, dtype=dtype)
                else:  # vLLM's decode: one value a head, broadcast
                    A = torch.zeros(nh)[:, None, None].expand(nh, hd, ds)
                    dtb = torch.zeros(nh)[:, None].expand(nh, hd)
                    dt = torch.zeros(ntok, nh, dtype=dtype)[:, :, None].expand(ntok, nh, hd)
                ssu_mod.selective_state_update(state, x, dt, A, B, B.clone(), dtb.clone(), dt_bias=dtb,
                                               z=None, dt_softplus=True, state_batch_indices=idx,
                                               out=x.clone(), early_state_load=True, **spec)
            elif kernel_name == "gdn":  # as the GDN layer calls it in decode (vLLM 0.33's packed decode)
                from mambalab.kernels.gated_delta_rule_packed import fused_recurrent_gated_delta_rule_packed_decode

                g = bench.GDN
                H, HV, K, V = g["H"], g["HV"], g["K"], g["V"]
                mixed = torch.zeros(captured, 2 * H * K + HV * V, dtype=torch.bfloat16)
                ab = torch.zeros(captured, HV, dtype=torch.bfloat16)
                pool = torch.zeros(captured + 1, HV, V, K, dtype=dtype)
                out = torch.empty(captured, 1, HV, V, dtype=torch.bfloat16)
                fused_recurrent_gated_delta_rule_packed_decode(mixed, ab, ab.clone(), torch.zeros(HV), torch.zeros(HV),
                                                               K ** -0.5, pool, out, idx, True, early_state_load=True)
            elif kernel_name == "conv":
                from mambalab.kernels.causal_conv1d import causal_conv1d_update, make_conv_state

                c = bench.CONV
                dim, width = c["dim"], c["width"]
                x = torch.zeros(captured, dim, dtype=dtype)
                state = make_conv_state(captured + 1, dim, width - 1, dtype, "cpu")
                causal_conv1d_update(x, state, torch.zeros(dim, width, dtype=dtype), torch.zeros(dim, dtype=dtype),
                                     activation="silu", conv_state_indices=idx, out=torch.empty_like(x))
            else:
                raise SystemExit(f"unknown kernel {kernel_name!r}")
    finally:
        sanitizer.launch = old_launch
    return caught


def compile_launch(caught):
    """Compile the caught launch for sm_90 exactly as ``kernel[grid](...)`` would; return the kernel."""
    driver.set_active(_StandInDriver())  # left active: this process has no real driver to go back to
    return caught["kernel"].run(*caught["args"], grid=caught["grid"], warmup=True, **caught["kwargs"])


def resources(compiled) -> dict:
    """Registers, shared memory, local (spill) memory from the cubin; SASS instruction count."""
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        report = subprocess.run([_nvidia_bin("cuobjdump"), "--dump-resource-usage", str(cubin)],
                                capture_output=True, text=True).stdout
    found = dict(re.findall(r"(REG|SHARED|LOCAL|STACK):(\d+)", report))
    sass = sass_of(compiled)
    return {
        "registers": int(found.get("REG", -1)),
        "shared": int(found.get("SHARED", -1)),
        "local": int(found.get("LOCAL", -1)),
        "sass_instructions": sum(1 for line in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4}\*/", line)),
        "num_warps": compiled.metadata.num_warps,
    }


def sass_of(compiled) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "k.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        return subprocess.run([_nvidia_bin("cuobjdump"), "--dump-sass", str(cubin)], capture_output=True,
                              text=True).stdout


CASES = [("ssu", "fp32"), ("ssu", "bf16"), ("gdn", "fp32"), ("gdn", "bf16"), ("conv", "fp32"), ("conv", "bf16")]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--cases", default=",".join(f"{k}-{d}" for k, d in CASES))
    ap.add_argument("--sass", help="print the SASS of one case, e.g. ssu-bf16")
    ap.add_argument("--ops", help="print one case's SASS opcodes, most frequent first, e.g. ssu-bf16-element")
    ap.add_argument("--device-name", help="the card's name for the launch rules keyed by it, e.g. "
                    "'NVIDIA H100 80GB HBM3' (default: none, the H200's rules)")
    args = ap.parse_args(argv)
    rules = f", the launch rules of {args.device_name}" if args.device_name else ""
    print(f"triton {triton.__version__}, sm_90a, batch {args.batch}{rules}")
    print("| kernel | state | kernel, grid | launch | registers | shared B | local B | SASS instr |")
    print("|---|---|---|---|---|---|---|---|")
    for case in args.cases.split(","):
        k, d, *variant = case.split("-")  # kernel-state[-variant]: ssu-bf16-element, ssu-bf16-spec4
        caught = capture(k, DTYPES[d], args.batch, variant="".join(variant), device_name=args.device_name)
        compiled = compile_launch(caught)
        r = resources(compiled)
        shape = ("BLOCK_M", "BLOCK_N", "BK", "BV", "ROWS", "SPLIT", "RB", "NB", "STAGES", "REQS", "TOKENS")
        launch = {n: v for n, v in caught["kwargs"].items() if n in shape}
        flags = [n for n in ("USE_PDL", "TRIGGER", "EARLY_STATE", "EARLY_ONE", "RAW_QK", "HEADS_FIRST",
                             "FAST_SOFTPLUS") if caught["kwargs"].get(n)]
        name = getattr(caught["kernel"], "__name__", None) or caught["kernel"].fn.__name__
        print(f"| {k} | {'-'.join([d, *variant])} | `{name}` {caught['grid']} | {launch} w={r['num_warps']} "
              f"{' '.join(flags)} | {r['registers']} | {r['shared']} | {r['local']} | {r['sass_instructions']} |",
              flush=True)
        if args.sass == case:
            print(sass_of(compiled))
        if args.ops == case:
            ops = collections.Counter(re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)",
                                                 sass_of(compiled)))
            print(" ".join(f"{op}:{n}" for op, n in ops.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
