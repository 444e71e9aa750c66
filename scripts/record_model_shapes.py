#!/usr/bin/env python3
"""Record the decode kernels beside vLLM 0.33's at other models' shapes and tensor-parallel ranks (GPU only).

    # on a GPU machine, vLLM's kernels extracted into .vllm/ (scripts/vllm_baseline.py):
    PYTHONPATH=$PWD/lib:$PWD/.vllm python3 scripts/record_model_shapes.py OUT.json

The bench (``python -m mambalab bench``) times each kernel at one shape; this times them at the shapes of
:mod:`mambalab.gpu.model_shapes` (NemotronH-8B at TP 2 / 4 / 8, Nemotron Nano 2 at TP 1 / 2, Falcon-H1 1.5B / 7B,
Qwen3-Next at TP 2 / 4 / 8 and the convs before them), one decode token a request, at batches 1, 8, 9 -> 16, 64 and
256, each after the bench's agreement gate: vLLM once, mambalab twice (the faster kept), the bench's timing (a CUDA
graph over cold pools), and up to 16 requests also after a torch kernel that does not trigger PDL. The result is what
:mod:`mambalab.gpu.shapes_report` reads (``lib/mambalab/gpu/recorded/model-shapes-h200.json``: notebook 06).
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "lib"), str(ROOT / "scripts")]

import torch  # noqa: E402
import triton  # noqa: E402

import ab_sweep  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import CASES, agreement  # noqa: E402
from mambalab.gpu.model_shapes import conv_shape, gdn_shape, ssu_shape  # noqa: E402
from mambalab.gpu.shapes_report import COMMAND  # noqa: E402

BATCHES = ((1, 1), (8, 8), (9, 16), (64, 64), (256, 256))
MAMBA = (("NemotronH-8B", 2), ("NemotronH-8B", 4), ("NemotronH-8B", 8), ("Nemotron-Nano-9B-v2", 1),
         ("Nemotron-Nano-9B-v2", 2), ("Falcon-H1-1.5B", 1), ("Falcon-H1-7B", 1))
QWEN = (("Qwen3-Next-80B-A3B", 2), ("Qwen3-Next-80B-A3B", 4), ("Qwen3-Next-80B-A3B", 8))
CONV = QWEN + (("NemotronH-8B", 1), ("NemotronH-8B", 4), ("Nemotron-Nano-9B-v2", 1), ("Falcon-H1-1.5B", 1),
               ("Falcon-H1-7B", 1))
SHAPE = {"ssu": ssu_shape, "gdn": gdn_shape, "conv": conv_shape}


def configs() -> list[tuple]:
    """``(kernel, model, tp, state, act)`` for every recorded row set: an fp32 or bf16 state, bf16 activations
    (the conv's state in its activations' dtype)."""
    out = [("ssu", m, tp, st, "bf16") for m, tp in MAMBA for st in ("fp32", "bf16")]
    out += [("gdn", m, tp, st, "bf16") for m, tp in QWEN for st in ("bf16", "fp32")]
    out += [("conv", m, tp, t, t) for m, tp in CONV for t in ("bf16", "fp32")]
    return out


def row(kernel, model, tp, state, act, active, captured, copy_gbps) -> dict:
    """One configuration at one batch: gate, vLLM's and mambalab's µs, after a torch kernel up to 16 requests."""
    z = kernel == "gdn"  # the cases' z: the SSU without it (mamba_mixer2's call); the GDN and conv ignore it
    case = CASES[kernel](active, captured, bench.DTYPES[state], bench.DTYPES[act], z, "cloned", 1,
                         shape=SHAPE[kernel](model, tp))
    ok, msg = agreement(case, ["mambalab", "vllm"])
    r = dict(kernel=kernel, model=model, tp=tp, state=state, act=act, active=active, captured=captured, agree=ok,
             us_vllm=ab_sweep.timed(case, "vllm"), us=min(ab_sweep.timed(case, "mambalab") for _ in range(2)))
    if not ok:
        r["gate"] = msg
    for key, us in (("pct_copy_vllm", "us_vllm"), ("pct_copy", "us")):
        r[key] = 100 * case.nbytes / r[us] / 1e3 / copy_gbps
    if captured <= 16:
        r["us_vllm_after_torch"] = ab_sweep.timed(case, "vllm", after_torch=True)
        r["us_after_torch"] = min(ab_sweep.timed(case, "mambalab", after_torch=True) for _ in range(2))
    del case
    torch.cuda.empty_cache()
    return r


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__)
        return 2
    bench._vllm_path()
    copy = bench.copy_bandwidth()
    rows = []
    for kernel, model, tp, state, act in configs():
        for active, captured in BATCHES:
            rows.append(row(kernel, model, tp, state, act, active, captured, copy))
            r = rows[-1]
            print(f"{kernel} {model} tp{tp} {state}/{act} {active}->{captured}: vllm {r['us_vllm']:7.2f} "
                  f"({r['pct_copy_vllm']:4.1f}%) ours {r['us']:7.2f} ({r['us_vllm'] / r['us']:.3f}x)"
                  f"{'' if r['agree'] else ' GATE FAILED'}", flush=True)
    env = dict(date=datetime.date.today().isoformat(), device=torch.cuda.get_device_name(),
               torch=torch.__version__, triton=triton.__version__, copy_gbps=copy,
               vllm="0.33.0 (decode kernels extracted by scripts/vllm_baseline.py)",
               command=COMMAND)
    Path(argv[0]).write_text(json.dumps(dict(environment=env, rows=rows), indent=0))
    print("wrote", argv[0], len(rows), "rows", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
