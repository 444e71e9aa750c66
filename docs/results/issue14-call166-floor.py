"""Issue 14, call 166: the copy floor of every row the recording of call 163 misses, beside vLLM 0.33 and mambalab at
8bbd42f in one process (call 53 measured the floors of an older recording, with older kernels and vLLM's older
GDN baseline).

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call166-floor.py

The rows: every compared row of ``lib/mambalab/gpu/recorded/bench-h200-vllm.json`` below its target (1.1x where vLLM
is under 80% of copy), then the rows the 88%-of-copy target reads (SSU and GDN at 64 / 128, bf16 activations).
Floors (:mod:`mambalab.gpu.copy_floor`): torch ``copy_`` of the row's bytes and the fastest slot copy (the kernels'
access pattern, state bytes only), timed as the bench times kernels. vLLM and mambalab are timed twice each,
interleaved around the floors, the best of each kept. vLLM's time over the floor's is the most any kernel moving
those bytes could be ahead of vLLM in this harness; the floor's time over ours is how near ours is.
"""
import json
import os
import sys

sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from ab_sweep import BUDGET, Sweep, timed  # noqa: E402
from mambalab.gpu import bench, gpu_report  # noqa: E402
from mambalab.gpu.bench_cases import CASES  # noqa: E402
from mambalab.gpu.copy_floor import floor_times  # noqa: E402

OUT = os.environ.get("OUT", ".")
RECORDED = "lib/mambalab/gpu/recorded/bench-h200-vllm.json"


def missed_rows() -> list[bench.Row]:
    """mambalab's rows of the recording below their target, then the rows of the 88% target."""
    data = gpu_report.load_comparison(RECORDED, live=False)
    ours = {(r.config, r.batch, r.captured): r for r in data.rows if r.impl == "mambalab" and r.null_rows == "skip"}
    keys = [(c["config"], c["batch"], c["captured"]) for c in gpu_report.comparison_rows(data) if not c["met"]]
    for kernel, state in (("ssu", "fp32"), ("ssu", "bf16"), ("gdn", "fp32"), ("gdn", "bf16")):
        config = bench.config_key(kernel, state, "bf16", "none" if kernel == "ssu" else "z", "cloned")
        keys += [(config, b, b) for b in (64, 128) if (config, b, b) not in keys]
    return [ours[k] for k in keys]


def main() -> None:
    sweep = Sweep("ab-floor")
    name = torch.cuda.get_device_name()
    print("device", name, flush=True)
    rows = []
    for r in missed_rows():
        case = CASES[r.kernel](r.batch, r.captured, bench.DTYPES[r.dtype], bench.DTYPES[r.act], r.z == "z", r.pools,
                               r.tokens, r.dt)
        v, m = timed(case, "vllm"), timed(case, "mambalab")
        f = floor_times(case, BUDGET)
        v, m = min(v, timed(case, "vllm")), min(m, timed(case, "mambalab"))
        best = min(f["copy"], f.get("slot", f["copy"]))
        pct = lambda us: 100 * case.nbytes / us / 1e3 / sweep.copy  # noqa: E731
        rows.append(dict(config=r.config, batch=r.batch, captured=r.captured, nbytes=case.nbytes, vllm=v,
                         mambalab=m, floor=best, possible=v / best, ours_of_floor=best / m, **f))
        slot = f" slot {f['slot']:7.2f} ({pct(f['slot']):4.1f}%, {f['slot_variant']})" if "slot" in f else ""
        print(f"floor {r.config} {r.batch}->{r.captured}: vllm {v:7.2f} ({pct(v):4.1f}%) ours {m:7.2f} "
              f"({v / m:.3f}x) | copy_ {f['copy']:7.2f} ({pct(f['copy']):4.1f}%){slot} | most possible "
              f"{v / best:.3f}x, ours at {100 * best / m:.1f}% of the floor's speed", flush=True)
        with open(f"{OUT}/floor.json", "w") as fh:
            json.dump(dict(device=name, copy_gbps=sweep.copy, recorded=RECORDED, rows=rows), fh, indent=0)
        del case
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
