"""Bug #35431 on a real GPU: a `-1` padded row reaching a consumer that trusts it.

Run under compute-sanitizer (separate cudaMalloc per tensor, so the bytes just
before the state pool belong to no allocation and memcheck can name them):

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck \
        python -m mambalab.gpu.pad_minus_one --bug     # invalid __global__ read/write
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck \
        python -m mambalab.gpu.pad_minus_one --fixed   # 0 errors

`--bug` pads the batch with PAD_SLOT_ID (-1) and launches the Mamba2
selective-state-update kernel with the guard of the pad-minus-one world (a
consumer that trusts every index). A stand-in: vLLM's SSU already masked
``pad_slot_id`` before #35431; the consumer that crashed (issue #33664) was
the FlashMLA FP8 decode kernel, per #35969. `--fixed` pads with NULL_BLOCK_ID (0) and
uses the fixed guard: padded rows touch nothing.
"""

from __future__ import annotations

import argparse
import sys

import torch

import mambalab
from mambalab.lab import bugs as bugmod
from mambalab.kernels.mamba_ssm import selective_state_update


def main() -> int:
    ap = argparse.ArgumentParser()
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--bug", action="store_true")
    mode.add_argument("--fixed", action="store_true")
    args = ap.parse_args()
    if mambalab.device.DEVICE_TYPE != "cuda":
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    cfg = mambalab.BugConfig.with_bugs("pad-minus-one") if args.bug else mambalab.BugConfig()
    torch.manual_seed(0)
    slots, nheads, dim, dstate, active, padded = 9, 4, 16, 16, 3, 8
    dev = "cuda"
    state = torch.randn(slots, nheads, dim, dstate, device=dev)
    x = torch.randn(padded, nheads, dim, device=dev)
    dt = torch.rand(padded, nheads, dim, device=dev)
    A = -torch.rand(nheads, dim, dstate, device=dev)
    B = torch.randn(padded, 1, dstate, device=dev)
    C = torch.randn(padded, 1, dstate, device=dev)
    D = torch.randn(nheads, dim, device=dev)
    idx = torch.full((padded,), cfg.block_table_pad_value, dtype=torch.int32, device=dev)
    idx[:active] = torch.tensor([3, 5, 7], dtype=torch.int32)
    print(f"{cfg}: state_batch_indices = {idx.tolist()}", flush=True)
    with bugmod.use(cfg):
        out = selective_state_update(state, x, dt, A, B, C, D, state_batch_indices=idx)
    torch.cuda.synchronize()
    print(f"launched; out[:active] finite: {bool(torch.isfinite(out[:active]).all())}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
