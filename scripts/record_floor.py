#!/usr/bin/env python3
"""Time the copy floor of every row the recorded runs leave short, beside vLLM 0.33 and mambalab, in one process.

    # on the GPU machine, .vllm/ from scripts/vllm_baseline.py, fla-core and the wheels in /tmp/site:
    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site COMMIT=<tree> python3 scripts/record_floor.py OUT/floor.json

The rows are :func:`mambalab.gpu.floor_report.floor_cases` of the installed recording and its repeats
(:func:`mambalab.gpu.run_spread.recorded_runs`). For each: vLLM's and mambalab's time as the bench takes it, then
:func:`mambalab.gpu.copy_floor.floor_times` (torch's ``copy_`` of the bytes; for the SSU and GDN the fastest slot copy
under PDL and the fastest token floor). The JSON is written after every row; installed as
``lib/mambalab/gpu/recorded/floor-h200.json``, where :mod:`mambalab.gpu.floor_report` reads it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch  # noqa: E402

from ab_sweep import BUDGET, timed  # noqa: E402
from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.copy_floor import SLOT_COPY_VARIANTS, floor_times  # noqa: E402
from mambalab.gpu.floor_report import floor_cases  # noqa: E402
from mambalab.gpu.run_spread import recorded_runs  # noqa: E402

PDL_SLOT = [v for v in SLOT_COPY_VARIANTS if v.pdl]  # the slot copy's fastest at every row of calls 53, 179 and 228


def main(out: str) -> int:
    bench._vllm_path()
    copy = bench.copy_bandwidth()
    env = {**bench.environment(), "commit": os.environ.get("COMMIT", "?")}
    print(f"{env['device']}: copy {copy:.0f} GB/s", flush=True)
    rows = []
    for c in floor_cases(recorded_runs()):
        case = bench.make_case(c["kernel"], c["state"], c["act"], c["z"], c["pools"], c["tokens"], c["batch"],
                               c["captured"], c["dt"])
        v, m = timed(case, "vllm"), timed(case, "mambalab")
        f = floor_times(case, BUDGET, PDL_SLOT, token=True)
        row = {**c, "nbytes": case.nbytes, "vllm_us": v, "mambalab_us": m, "copy_us": f["copy"],
               "slot_us": f.get("slot"), "slot_variant": f.get("slot_variant"), "token_us": f.get("token"),
               "token_variant": f.get("token_variant")}
        rows.append(row)
        fl = min(x for x in (f["copy"], f.get("slot"), f.get("token")) if x is not None)
        print(f"{c['config']} {c['batch']}>{c['captured']}: vllm {v:7.2f} ours {m:7.2f} ({v / m:.3f}x) floor "
              f"{fl:7.2f} (most {v / fl:.3f}x; ours at {fl / m:.1%} of its speed)", flush=True)
        with open(out, "w") as fh:
            json.dump({"environment": env, "copy_gbps": copy, "rows": rows}, fh, indent=0)
        del case
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    raise SystemExit(main(sys.argv[1]))
