"""Launch rules of the GDN decode step keyed by the GPU's name, where one card wants other shapes than the H200.

:mod:`.gated_delta_rule`'s rules (``STREAM``, ``launch_config``, ``split_rows``) were measured on an H200. vLLM keys its
tuned Triton configs by device name the same way (``vllm/model_executor/layers/mamba/ops/configs/
selective_state_update/headdim=64,dstate=128,device_name=NVIDIA_H100_80GB_HBM3,cache_dtype=float32.json`` in 0.33);
this table holds the few places where the measured winner differs, one token a sequence and from a batch on. Not a
mirror of an upstream file.

NVIDIA H100 80GB HBM3, beside vLLM 0.33's packed decode (the kernel Qwen3-Next runs), A/B interleaved with the
agreement gate (docs/results/issue14-call16{8,9,70}-*.txt; docs/benchmarks.md, "Calls 166-170"), vLLM's time over
ours at 128 / 256 / 512 sequences:

* bf16 state: the general kernel, 32 rows a program in one piece (``SPLIT`` 1), not the streaming kernel:
  0.994-0.997 / 0.989-0.990 / 0.985x -> 0.999 / 1.003 / 1.002x. (The general kernel with two pieces 0.992-1.004x;
  with 2 or 4 warps, 16 or 64 rows: slower.)
* fp32 state: 16 rows a program on 2 warps, not 8 on one: 0.995-0.998 / 0.993-0.994 / 0.993x -> 1.010 / 1.004 /
  1.003x. (2 warps with 8 rows 0.999-1.001x, 16 rows on one warp 0.997-1.003x, 4 warps 0.92x.)

The H200's rules were set by its own measurements (the streaming kernel from 16 sequences, calls 114-115; the general
kernel's tiles by ``scripts/tune_launch.py``, see ``launch_config`` and ``split_rows``); these shapes have not been
measured on an H200 beside vLLM's packed decode, so they stay off there and on every other card.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from mambalab.kernels.common import device_name


class DeviceRule(NamedTuple):
    """From ``min_sequences`` one-token sequences on: ``state_bytes`` of state a program (``BV`` rows of ``K``),
    ``num_warps`` and ``split`` (row pieces a tile); the streaming kernel is not used."""

    min_sequences: int
    state_bytes: int
    num_warps: int
    split: int


# device name (torch.cuda.get_device_name) -> state element size -> rule
DEVICE_RULES: dict[str, dict[int, DeviceRule]] = {
    "NVIDIA H100 80GB HBM3": {2: DeviceRule(128, 8192, 1, 1), 4: DeviceRule(128, 8192, 2, 1)},
}


def device_rule(device: torch.device, state_element_size: int, num_sequences: int) -> DeviceRule | None:
    """The rule for a one-token launch of ``num_sequences`` on ``device``, or None (the H200's rules apply)."""
    rule = DEVICE_RULES.get(device_name(device) or "", {}).get(state_element_size)
    return rule if rule is not None and num_sequences >= rule.min_sequences else None

