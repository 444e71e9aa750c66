"""One interpreted decode launch, one request a program against every request in one (issue 16).

Times ``selective_state_update``, ``fused_recurrent_gated_delta_rule`` and ``causal_conv1d_update`` under the
sanitizer at the tiny model's shapes, batches 1, 2, 4 and 8 of live requests on slots of their own, with
``kernels.common.REQUESTS_A_PROGRAM`` off and on (the launch memo off, so every launch runs; Triton's overflow
asserts off, as an engine runs its kernels), and prints the median of ``--reps`` launches in ms:

    MAMBALAB_DEVICE=cpu .venv/bin/python scripts/bench_interpreter_requests.py [--reps 15] [--record] [--asserts]

``--record`` times them inside ``sanitizer.recording()``, as a panel's steps run; ``--asserts`` keeps the
overflow asserts (a plain call outside an engine).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

import torch  # noqa: E402

from mambalab.device import without_overflow_asserts  # noqa: E402
from mambalab.kernels import common  # noqa: E402
from mambalab.kernels.causal_conv1d import causal_conv1d_update, make_conv_state  # noqa: E402
from mambalab.kernels.gated_delta_rule import fused_recurrent_gated_delta_rule  # noqa: E402
from mambalab.kernels.mamba_ssm import selective_state_update  # noqa: E402
from mambalab.lab import launch_memo, sanitizer  # noqa: E402
from mambalab.model.config import TinyHybridConfig  # noqa: E402


def ssu(n: int, cfg: TinyHybridConfig, g: torch.Generator):
    nh, dim, ds = cfg.mamba_nheads, cfg.mamba_headdim, cfg.mamba_dstate
    state = torch.randn(n + 1, nh, dim, ds, generator=g)
    x, z = torch.randn(n, nh, dim, generator=g), torch.randn(n, nh, dim, generator=g)
    dt = torch.randn(n, nh, 1, generator=g).expand(n, nh, dim)
    A = (-torch.rand(nh, 1, 1, generator=g)).expand(nh, dim, ds)
    dt_bias = torch.randn(nh, 1, generator=g).expand(nh, dim)
    B, C = torch.randn(n, 1, ds, generator=g), torch.randn(n, 1, ds, generator=g)
    D, idx = torch.randn(nh, dim, generator=g), torch.arange(1, n + 1, dtype=torch.int32)
    return lambda: selective_state_update(state, x, dt, A, B, C, D, dt_bias, z, True, idx)


def gdn(n: int, cfg: TinyHybridConfig, g: torch.Generator):
    H, HV, K, V = cfg.gdn_num_k_heads, cfg.gdn_num_v_heads, cfg.gdn_head_k_dim, cfg.gdn_head_v_dim
    q, k = torch.randn(n, 1, H, K, generator=g), torch.randn(n, 1, H, K, generator=g)
    v, a, b = torch.randn(n, 1, HV, V, generator=g), -torch.rand(n, 1, HV, generator=g), torch.rand(n, 1, HV, generator=g)
    h0, idx = torch.randn(n + 1, HV, V, K, generator=g), torch.arange(1, n + 1, dtype=torch.int32)
    return lambda: fused_recurrent_gated_delta_rule(q, k, v, a, b, initial_state=h0, ssm_state_indices=idx,
                                                    use_qk_l2norm_in_kernel=True)


def conv(n: int, cfg: TinyHybridConfig, g: torch.Generator):
    dim, width = cfg.mamba_conv_dim, 4
    x, w, bias = torch.randn(n, dim, generator=g), torch.randn(dim, width, generator=g), torch.randn(dim, generator=g)
    state = make_conv_state(n + 1, dim, width - 1)
    idx = torch.arange(1, n + 1, dtype=torch.int32)
    return lambda: causal_conv1d_update(x, state, w, bias, "silu", conv_state_indices=idx)


def time_launch(fn, reps: int, record: bool) -> float:
    fn()  # the kernel's first interpreted launch adds Triton's helpers to its module: not timed
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        with sanitizer.recording() if record else contextlib.nullcontext():
            fn()
        ts.append(time.perf_counter() - t)
    return 1000 * statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--record", action="store_true", help="inside sanitizer.recording(), as a panel's steps")
    ap.add_argument("--asserts", action="store_true", help="keep Triton's int32-overflow asserts on")
    args = ap.parse_args()
    cfg = TinyHybridConfig()
    print(f"ms a launch, median of {args.reps}{', accesses recorded' if args.record else ''}"
          f"{', overflow asserts on' if args.asserts else ''}")
    print(f"{'kernel':34s} {'batch':>5s} {'one a program':>14s} {'all in one':>11s} {'speed-up':>9s}")
    with launch_memo.disabled(), contextlib.nullcontext() if args.asserts else without_overflow_asserts():
        for name, make in (("selective_state_update", ssu), ("fused_recurrent_gated_delta_rule", gdn),
                           ("causal_conv1d_update", conv)):
            for n in (1, 2, 4, 8):
                ms = []
                for on in (False, True):
                    common.REQUESTS_A_PROGRAM = on
                    ms.append(time_launch(make(n, cfg, torch.Generator().manual_seed(n)), args.reps, args.record))
                common.REQUESTS_A_PROGRAM = True
                print(f"{name:34s} {n:5d} {ms[0]:14.2f} {ms[1]:11.2f} {ms[0] / ms[1]:8.2f}x")


if __name__ == "__main__":
    main()
