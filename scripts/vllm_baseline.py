"""Make vLLM's own decode kernels importable as a benchmark baseline, without installing vLLM.

``import vllm`` does not work on the lent GPU machine (the wheel's compiled parts need a matching
torch), but the three decode kernels the bench compares against are plain Python + Triton:

* ``vllm/model_executor/layers/mamba/ops/{mamba_ssm.py, causal_conv1d.py, triton_helpers.py}``
  and the ``configs/`` folder beside them (the tuned SSU launch tables, per device);
* ``vllm/third_party/flash_linear_attention/ops/{fused_recurrent.py, fused_sigmoid_gating.py, op.py, utils.py,
  index.py, l2norm.py}`` (vLLM's copy of fla's ``fused_recurrent_gated_delta_rule``, and the two GDN decode
  kernels Qwen3-Next's layer runs: ``fused_recurrent_gated_delta_rule_packed_decode`` without speculation,
  ``fused_sigmoid_gating_delta_rule_update`` with it).

This script extracts exactly those files from the vLLM wheel into an ignored folder (default
``.vllm/``) and writes, beside them, the few small stand-ins for the modules they import
(``vllm.logger``, ``vllm.envs``, ``vllm.platforms.current_platform``, ``vllm.triton_utils``,
``vllm.utils.*``, ``vllm.v1.attention.backends.utils.NULL_BLOCK_ID``, ``vllm._custom_ops``).
The stand-ins are ours; vLLM's files are never committed (``.gitignore`` lists the folder).
With ``PYTHONPATH=.vllm`` (``python -m mambalab bench`` adds it itself when the folder exists)
``from vllm.model_executor.layers.mamba.ops.mamba_ssm import selective_state_update`` works.

    python -m pip download --no-deps --only-binary=:all: -d /tmp/vllm-wheel vllm==0.33.0
    python scripts/vllm_baseline.py /tmp/vllm-wheel/vllm-0.33.0-*.whl        # -> .vllm/
    python scripts/vllm_baseline.py --check                                   # imports work (GPU)

The device call carries ``.vllm`` (a few hundred KiB).
"""

from __future__ import annotations

import argparse
import fnmatch
import pathlib
import sys
import zipfile

FILES = [
    "vllm/model_executor/layers/mamba/ops/mamba_ssm.py",
    "vllm/model_executor/layers/mamba/ops/causal_conv1d.py",
    "vllm/model_executor/layers/mamba/ops/triton_helpers.py",
    "vllm/model_executor/layers/mamba/ops/configs/*",
    "vllm/third_party/flash_linear_attention/ops/fused_recurrent.py",
    "vllm/third_party/flash_linear_attention/ops/fused_sigmoid_gating.py",
    "vllm/third_party/flash_linear_attention/ops/op.py",
    "vllm/third_party/flash_linear_attention/ops/utils.py",
    "vllm/third_party/flash_linear_attention/ops/index.py",
    "vllm/third_party/flash_linear_attention/ops/l2norm.py",
]

# Empty packages on the way to the extracted files (their real __init__ files import half of vLLM).
PACKAGES = [
    "vllm", "vllm/model_executor", "vllm/model_executor/layers", "vllm/model_executor/layers/mamba",
    "vllm/model_executor/layers/mamba/ops", "vllm/third_party", "vllm/third_party/flash_linear_attention",
    "vllm/third_party/flash_linear_attention/ops", "vllm/utils", "vllm/v1", "vllm/v1/attention",
    "vllm/v1/attention/backends", "vllm/platforms", "vllm/triton_utils",
]

# Our stand-ins: only what the extracted files use, with vLLM's behaviour on a CUDA machine.
STANDINS = {
    "vllm/__init__.py": '"""Stand-in package (mambalab scripts/vllm_baseline.py): only the decode kernels."""\n'
                        '__version__ = "{version}"\n',
    "vllm/envs.py": "VLLM_TUNED_CONFIG_FOLDER = None\nVLLM_TRITON_FORCE_FIRST_CONFIG = False\n",
    "vllm/_custom_ops.py": '"""Stand-in: the compiled ops are not used by the decode kernels."""\n',
    "vllm/logger.py": '''import logging

_seen = set()


class _Logger(logging.LoggerAdapter):
    def _once(self, level, msg, *args, **kwargs):
        kwargs.pop("scope", None)
        if (level, msg) not in _seen:
            _seen.add((level, msg))
            self.log(level, msg, *args, **kwargs)

    def info_once(self, msg, *args, **kwargs):
        self._once(logging.INFO, msg, *args, **kwargs)

    def warning_once(self, msg, *args, **kwargs):
        self._once(logging.WARNING, msg, *args, **kwargs)

    def debug_once(self, msg, *args, **kwargs):
        self._once(logging.DEBUG, msg, *args, **kwargs)


def init_logger(name):
    return _Logger(logging.getLogger(name), {})
''',
    "vllm/platforms/__init__.py": '''import torch


class _CudaPlatform:
    """What the decode kernels ask of vLLM's current_platform, answered for a CUDA machine."""

    def is_cuda(self):
        return torch.cuda.is_available() and torch.version.hip is None

    def is_rocm(self):
        return torch.version.hip is not None

    def is_cuda_alike(self):
        return torch.cuda.is_available()

    def is_xpu(self):
        return False

    def is_cpu(self):
        return not torch.cuda.is_available()

    def get_device_capability(self, device_id=0):
        return torch.cuda.get_device_capability(device_id)

    def has_device_capability(self, capability, device_id=0):
        major, minor = torch.cuda.get_device_capability(device_id)
        if isinstance(capability, tuple):
            return (major, minor) >= capability
        return major * 10 + minor >= capability

    def is_device_capability_family(self, capability, device_id=0):
        major, minor = torch.cuda.get_device_capability(device_id)
        return (major * 10 + minor) // 10 == capability // 10

    def is_arch_support_pdl(self):
        # vLLM: programmatic dependent launch on Hopper and later
        return self.is_cuda() and torch.cuda.get_device_capability()[0] >= 9


current_platform = _CudaPlatform()
''',
    "vllm/triton_utils/__init__.py": '''import triton
import triton.language as tl
import triton.language.extra.libdevice as tldevice

HAS_TRITON = True
''',
    "vllm/utils/platform_utils.py": '''import torch


def get_device_name_as_file_name():
    return torch.cuda.get_device_name().replace(" ", "_")
''',
    "vllm/utils/gpu_sync_debug.py": '''import contextlib


@contextlib.contextmanager
def gpu_sync_allowed():
    yield
''',
    "vllm/utils/torch_utils.py": '''import torch


def async_tensor_h2d(data, dtype, target_device, pin_memory=False):
    return torch.tensor(data, dtype=dtype, device="cpu").to(target_device, non_blocking=True)
''',
    "vllm/v1/attention/backends/utils.py": "NULL_BLOCK_ID = 0\nPAD_SLOT_ID = -1\n",
}


def extract(wheel: pathlib.Path, dest: pathlib.Path) -> list[str]:
    version = wheel.name.split("-")[1]
    taken = []
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if any(fnmatch.fnmatch(name, pat) for pat in FILES) and not name.endswith("/"):
                target = dest / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(zf.read(name))
                taken.append(name)
    for pkg in PACKAGES:
        init = dest / pkg / "__init__.py"
        init.parent.mkdir(parents=True, exist_ok=True)
        if not init.exists():
            init.write_text("")
    for rel, text in STANDINS.items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("{version}", version))
    (dest / "VERSION").write_text(version + "\n")
    return taken


def check() -> int:
    from vllm.model_executor.layers.mamba.ops.causal_conv1d import causal_conv1d_update  # noqa: F401
    from vllm.model_executor.layers.mamba.ops.mamba_ssm import selective_state_update  # noqa: F401
    from vllm.third_party.flash_linear_attention.ops.fused_recurrent import (  # noqa: F401
        fused_recurrent_gated_delta_rule, fused_recurrent_gated_delta_rule_packed_decode,
    )
    from vllm.third_party.flash_linear_attention.ops.fused_sigmoid_gating import (  # noqa: F401
        fused_sigmoid_gating_delta_rule_update,
    )
    import vllm

    print("vllm", vllm.__version__, "decode kernels importable")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("wheel", nargs="?", help="the vLLM wheel (pip download --no-deps vllm==0.33.0)")
    ap.add_argument("--dest", default=".vllm")
    ap.add_argument("--check", action="store_true", help="import the three kernels from --dest")
    args = ap.parse_args(argv)
    dest = pathlib.Path(args.dest)
    if args.check:
        sys.path.insert(0, str(dest.resolve()))
        return check()
    if not args.wheel:
        ap.error("give the wheel's path (or --check)")
    taken = extract(pathlib.Path(args.wheel), dest)
    n_cfg = sum("/configs/" in t for t in taken)
    print(f"{len(taken) - n_cfg} kernel files and {n_cfg} config files into {dest}/ (+ stand-ins)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
