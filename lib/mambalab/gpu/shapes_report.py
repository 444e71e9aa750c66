"""The kernels beside vLLM 0.33's at other models' shapes and tensor-parallel ranks, as tables: the run
``scripts/record_model_shapes.py`` records (:mod:`mambalab.gpu.model_shapes`' models, one token a request, after the
bench's agreement gate). Notebook 06 shows the recorded H200 run (``recorded/model-shapes-h200.json``); the targets
are the main comparison's (:func:`mambalab.gpu.gpu_report.target_speedup`: 1.1x where vLLM runs under 80% of copy,
else at least as fast).
"""

from __future__ import annotations

import json
from pathlib import Path

from mambalab.gpu.gpu_report import KERNEL_NAMES, RESULTS, batch_label, target_speedup
from mambalab.viz.text import Text

RECORDED_SHAPES = RESULTS / "model-shapes-h200.json"
COMMAND = "PYTHONPATH=$PWD/lib:$PWD/.vllm python3 scripts/record_model_shapes.py OUT.json"


def load(path: str | Path = RECORDED_SHAPES) -> dict:
    """The recorded run: ``{"environment": {...}, "rows": [...]}``."""
    return json.loads(Path(path).read_text())


def target(r: dict) -> float:
    """The speed-up asked of mambalab in row ``r`` (vLLM's time over ours): the main comparison's."""
    return target_speedup(r["pct_copy_vllm"])


def _ratio(r: dict) -> float:
    return r["us_vllm"] / r["us"]


def _batch(r: dict) -> str:
    return batch_label(r["active"], r["captured"])


def _after(r: dict) -> str:
    return f"{r['us_vllm_after_torch'] / r['us_after_torch']:.2f}x" if "us_after_torch" in r else "-"


def provenance(data: dict) -> Text:
    env = data["environment"]
    return Text(f"Recorded on {env['device']} on {env['date']} (torch {env['torch']}, Triton {env['triton']}; copy "
                f"{env['copy_gbps']:.0f} GB/s; vLLM {env['vllm']}); {len(data['rows'])} rows. Command:\n"
                f"{env['command']}")


def table(data: dict, kernel: str) -> Text:
    """One kernel's rows: model and rank, dtypes, batch, vLLM's µs (% of copy), mambalab's µs, vLLM's time over
    mambalab's (``!`` where short of :func:`target`) and the same after a torch kernel (up to 16 requests)."""
    lines = [f"{KERNEL_NAMES[kernel]}: vLLM 0.33 against mambalab at other shapes (vLLM/ml: above 1, mambalab faster)",
             f"{'model':<22}{'tp':>3} {'state/act':<10}{'batch':>7}{'vLLM us':>10}{'(copy)':>8}{'ml us':>9}"
             f"{'vLLM/ml':>9}{'after torch':>13}"]
    for r in (r for r in data["rows"] if r["kernel"] == kernel):
        ratio = _ratio(r)
        mark = "" if ratio >= target(r) and r["agree"] else " !" if r["agree"] else " GATE"
        lines.append(f"{r['model']:<22}{r['tp']:>3} {r['state'] + '/' + r['act']:<10}{_batch(r):>7}"
                     f"{r['us_vllm']:>10.2f}{r['pct_copy_vllm']:>7.1f}%{r['us']:>9.2f}{ratio:>8.2f}x{mark:<2}"
                     f"{_after(r):>11}")
    return Text("\n".join(lines))


def summary(data: dict) -> Text:
    """Per kernel: rows, gate failures, rows behind vLLM, rows short of their target, the least ratio; then every row
    short of its target and every row behind vLLM after a torch kernel."""
    out, short, behind_nb = [], [], []
    for kernel in ("ssu", "gdn", "conv"):
        rows = [r for r in data["rows"] if r["kernel"] == kernel]
        if not rows:
            continue
        ratios = [_ratio(r) for r in rows]
        short += [r for r in rows if _ratio(r) < target(r)]
        behind_nb += [r for r in rows if "us_after_torch" in r and r["us_after_torch"] > r["us_vllm_after_torch"]]
        out.append(f"{KERNEL_NAMES[kernel]}: {len(rows)} rows; gate failures {sum(not r['agree'] for r in rows)}; "
                   f"slower than vLLM in {sum(x < 1 for x in ratios)}; {min(ratios):.2f}x at the least")
    out.append(f"short of the target in {len(short)} of {len(data['rows'])} rows" + (":" if short else ""))
    out += [f"  {r['kernel']} {r['model']} tp{r['tp']} {r['state']}/{r['act']} {_batch(r)}: "
            f"{_ratio(r):.3f}x (asked {target(r):.1f}x; vLLM at {r['pct_copy_vllm']:.1f}% of copy)"
            for r in short]
    out.append(f"behind vLLM after a torch kernel in {len(behind_nb)} rows" + (":" if behind_nb else ""))
    out += [f"  {r['kernel']} {r['model']} tp{r['tp']} {r['state']}/{r['act']} {_batch(r)}: {_after(r)}"
            for r in behind_nb]
    return Text("\n".join(out))


__all__ = ["RECORDED_SHAPES", "COMMAND", "load", "target", "provenance", "table", "summary"]
