"""How far ahead of vLLM any kernel could be in the rows issue 14 leaves short: the copy floor beside them.

A decode kernel must read each live request's state slot and write it back; no kernel is faster than one that only
moves those bytes, launched the same way (:mod:`.copy_floor`: torch's ``copy_`` of the bytes, the fastest slot copy
in the kernels' access pattern under PDL, and the token floor, whose stores wait on a word read after PDL's wait).
``scripts/record_floor.py`` times, in one process on the GPU, vLLM 0.33, mambalab and those floors for every row that
some recorded run leaves short (:func:`floor_cases`); the run ships as ``recorded/floor-h200.json``. vLLM's time over
the fastest floor's is the most any kernel could be ahead of vLLM in that row ("most possible"): where it is under
the 1.1x asked, no kernel that moves the bytes as fast as those copies reaches the target in this harness: the row
says "out of reach". A kernel can run past a copy (its state loads overlap the launch before in other ways than the
copies'); the table shows mambalab's speed as a share of the floor's, so such rows show it. Where vLLM's own kernel
is faster than every copy measured (the conv, whose bytes one ``copy_`` moves more slowly than either kernel), the
copies are no bound: "no floor". The floors and both kernels are timed in one process, so the comparison does not mix
runs; the recorded runs give the target and the lowest ratio. Not a mirror of an upstream file.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from mambalab.gpu.bench import config_key
from mambalab.gpu.gpu_report import COPY_TARGET_PCT, RESULTS, BenchData, batch_label, comparison_rows, target_speedup
from mambalab.gpu.run_spread import spread_rows
from mambalab.viz._common import PALETTE
from mambalab.viz.text import Text

RECORDED_FLOOR = RESULTS / "floor-h200.json"
FLOORS = ("copy", "slot", "token")  # the floor run's times, µs: torch copy_, slot copy, token floor (SSU / GDN)


def floor_cases(runs: Sequence[BenchData]) -> list[dict]:
    """The rows a floor run times, as the bench's case keywords (``kernel state act z pools tokens batch captured
    dt``) with the row's ``config``: every row short of its target in some run of ``runs``, then every row of the
    88% target (SSU / GDN, one token, bf16 activations, ``z=None``, ``A``/``dt`` per head, pools cloned, an unpadded
    batch from 64) under 88% of copy in some run."""
    short = {(r["config"], r["batch"], r["captured"]) for r in spread_rows(runs) if r["met"] < len(runs)}
    low = {(r["config"], r["batch"], r["captured"]) for data in runs for r in comparison_rows(data)
           if r["config"] in _COPY_TARGET_CONFIGS and r["batch"] == r["captured"] and r["batch"] >= 64
           and r["mambalab_pct"] < COPY_TARGET_PCT}
    wanted, out, seen = short | low, [], set()
    for r in runs[0].rows:
        key = (r.config, r.batch, r.captured)
        if r.impl != "mambalab" or r.null_rows != "skip" or key in seen or key not in wanted:
            continue
        seen.add(key)
        out.append(dict(config=r.config, kernel=r.kernel, state=r.dtype, act=r.act, z=r.z, pools=r.pools,
                        tokens=r.tokens, batch=r.batch, captured=r.captured, dt=r.dt, short=key in short))
    return out


# the configurations of the % of copy target, as gpu_report.comparison_summary reads them
_COPY_TARGET_CONFIGS = {config_key(k, s, "bf16", "none", "cloned") for k in ("ssu", "gdn") for s in ("fp32", "bf16")}


def load_floor(path: str | Path = RECORDED_FLOOR) -> dict:
    """A floor run (``scripts/record_floor.py``'s JSON): ``environment``, ``copy_gbps``, ``rows``."""
    with open(path) as f:
        data = json.load(f)
    for r in data["rows"]:
        missing = [k for k in ("config", "batch", "captured", "nbytes", "vllm_us", "mambalab_us", "copy_us")
                   if r.get(k) is None]
        if missing:
            raise ValueError(f"{path}: a floor row lacks {missing}: {r.get('config')} at {r.get('batch')}")
    return data


def reach_rows(floor: dict, runs: Sequence[BenchData]) -> list[dict]:
    """One dict per row of the floor run: its times (µs), the fastest floor (``floor_us``, which one in ``floor``),
    ``most`` (vLLM's time over the floor's), ``ours_of_floor`` (the floor's time over mambalab's: 1 is a kernel as
    fast as a copy), the floor's % of copy, and from ``runs`` the row's target (the highest any run asked), its lowest
    and highest ratio and whether it missed its own run's target in some run (``short``, as :func:`floor_cases` picks
    rows); ``verdict``: "no floor" (vLLM faster than every
    copy), "out of reach" (``most`` under the target), else "room". ``pattern_us``, ``pattern_most``,
    ``ours_of_pattern``: the same against the copies in the kernels' own pattern alone (the slot copy and the token
    floor: the kernel's slots, one read and ``T`` writes), without torch's contiguous ``copy_`` (None for the conv)."""
    spread = {(r["config"], r["batch"], r["captured"]): r for r in spread_rows(runs)}
    out = []
    for f in floor["rows"]:
        times = {k: f[k + "_us"] for k in FLOORS if f.get(k + "_us") is not None}
        kind = min(times, key=times.get)
        fl = times[kind]
        s = spread.get((f["config"], f["batch"], f["captured"]))
        def pct(us: float) -> float:  # % of the run's copy peak
            return 100 * f["nbytes"] / us / 1e3 / floor["copy_gbps"]
        need = max(s["needs"]) if s else target_speedup(pct(f["vllm_us"]))
        pat = min((times[k] for k in ("slot", "token") if k in times), default=None)
        out.append(dict(config=f["config"], kernel=f.get("kernel"), state=f.get("state"), batch=f["batch"],
                        captured=f["captured"], vllm_us=f["vllm_us"],
                        mambalab_us=f["mambalab_us"], floor_us=fl, floor=kind, most=f["vllm_us"] / fl,
                        ours=f["vllm_us"] / f["mambalab_us"], ours_of_floor=fl / f["mambalab_us"],
                        floor_pct=pct(fl), mambalab_pct=pct(f["mambalab_us"]), need=need,
                        lowest=None if s is None else s["lo"], highest=None if s is None else s["hi"],
                        short=s is not None and s["met"] < len(runs), verdict=_verdict(f["vllm_us"] / fl, need),
                        pattern_us=pat, pattern_most=None if pat is None else f["vllm_us"] / pat,
                        ours_of_pattern=None if pat is None else pat / f["mambalab_us"]))
    return out


def _verdict(most: float, need: float) -> str:
    return "no floor" if most < 1.0 else "out of reach" if most < need else "room"


def reach_table(floor: dict, runs: Sequence[BenchData]) -> Text:
    """Each floor row: vLLM's time over mambalab's in the floor run and at its lowest over ``runs``, the most any
    kernel could be ahead (vLLM over the fastest floor), mambalab's speed as a share of the floor's, the verdict."""
    head = (f"{'configuration':<56} {'batch':>7} {'ours':>7} {'lowest':>7} {'most':>7} {'target':>6} "
            f"{'ours/floor':>10}  verdict")
    lines = [head, "-" * len(head)]
    for r in reach_rows(floor, runs):
        low = "-" if r["lowest"] is None else f"{r['lowest']:.3f}x"
        verdict = r["verdict"]
        lines.append(f"{r['config']:<56} {batch_label(r['batch'], r['captured']):>7} {r['ours']:>6.3f}x {low:>7} "
                     f"{r['most']:>6.3f}x {r['need']:>5.1f}x {r['ours_of_floor']:>9.1%}  {verdict}")
    return Text("\n".join(lines))


def reach_summary(floor: dict, runs: Sequence[BenchData]) -> Text:
    """How many short rows no kernel could lift to their target, how close mambalab runs to the floor in the others
    (and of those, the rows where only torch's contiguous ``copy_`` leaves room: the copies in the kernels' pattern
    would not reach the target there), and the 88% rows: the fastest copy's own % of copy there."""
    rows = reach_rows(floor, runs)
    short = [r for r in rows if r["short"]]
    by = {v: [r for r in short if r["verdict"] == v] for v in ("out of reach", "room", "no floor")}
    env = floor.get("environment", {})
    lines = [f"floor run: {env.get('device', '?')}, {env.get('date', '?')}, at {env.get('commit', '?')}; "
             f"{len(rows)} rows",
             f"short of the target in some run: {len(short)}; out of reach (vLLM within the target of the fastest "
             f"copy): {len(by['out of reach'])}; room: {len(by['room'])}; no floor: {len(by['no floor'])}"]
    for v, rs in by.items():
        if rs and v != "no floor":
            lines.append(f"  {v}: mambalab at {min(r['ours_of_floor'] for r in rs):.1%}-"
                         f"{max(r['ours_of_floor'] for r in rs):.1%} of the floor's speed, the most any kernel could "
                         f"be ahead {min(r['most'] for r in rs):.3f}-{max(r['most'] for r in rs):.3f}x")
    own = [r for r in by["room"] if r["pattern_most"] is not None and r["pattern_most"] < r["need"]]
    if own:  # room only against torch's contiguous copy_
        lines.append(f"  of those with room, {len(own)} only against torch's copy_: the copies in the kernels' own "
                     f"pattern would be {min(r['pattern_most'] for r in own):.3f}-"
                     f"{max(r['pattern_most'] for r in own):.3f}x ahead, mambalab at "
                     f"{min(r['ours_of_pattern'] for r in own):.1%}-{max(r['ours_of_pattern'] for r in own):.1%} "
                     f"of their speed")
    for r in rows:
        if r["batch"] == r["captured"] and r["batch"] >= 64 and r["config"] in _COPY_TARGET_CONFIGS:
            lines.append(f"{r['config']} at {r['batch']}: mambalab {r['mambalab_pct']:.1f}% of copy, the fastest "
                         f"copy of its bytes {r['floor_pct']:.1f}% ({COPY_TARGET_PCT:.0f}% asked)")
    return Text("\n".join(lines))


VERDICT_COLOUR = {"out of reach": PALETTE["vermillion"], "room": PALETTE["sky"], "no floor": PALETTE["grey"]}


def _label(config: str, batch: int, captured: int) -> str:
    """``ssu fp32/bf16 z=none cloned T=2 @ 8`` for a row's configuration and batch."""
    words = config.split()
    state, act = (w.split("=")[1] for w in words[1:3])
    rest = [w.split("=")[1] if w.startswith("pools=") else w for w in words[3:]]
    return " ".join([words[0], f"{state}/{act}", *rest]) + f" @ {batch_label(batch, captured)}"


def plot_reach(floor: dict, runs: Sequence[BenchData]) -> Figure:
    """Each row short of its target in some run: a bar from 1x to the most any kernel could be ahead of vLLM (vLLM's
    time over the fastest floor's), coloured by verdict; vLLM's time over mambalab's as a line from its lowest to its
    highest over ``runs``; the target as a dotted line. A bar that ends left of the target is out of reach."""
    rows = [r for r in reach_rows(floor, runs) if r["short"]]
    order = {"out of reach": 0, "room": 1, "no floor": 2}
    rows.sort(key=lambda r: (order[r["verdict"]], r["most"]))
    fig = Figure(figsize=(9.5, 0.9 + 0.24 * len(rows)), layout="constrained")
    ax = fig.subplots()
    for y, r in enumerate(rows):
        if r["verdict"] != "no floor":
            ax.barh(y, r["most"] - 1.0, left=1.0, height=0.6, color=VERDICT_COLOUR[r["verdict"]], alpha=0.8)
        else:
            ax.text(1.002, y, "no floor: one copy_ is slower than both kernels", va="center", fontsize=7)
        ax.plot([r["lowest"], r["highest"]], [y, y], color=PALETTE["black"], lw=2, solid_capstyle="butt")
        ax.plot([r["lowest"]], [y], marker="o", ms=3, color=PALETTE["black"])
        ax.plot([r["need"], r["need"]], [y - 0.4, y + 0.4], color=PALETTE["black"], ls=":", lw=1)
    ax.set_yticks(range(len(rows)), [_label(r["config"], r["batch"], r["captured"]) for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(1.0, max([1.25] + [r["most"] + 0.02 for r in rows]))
    ax.set_xlabel("vLLM's time over mambalab's (black: lowest (dot) to highest of the runs; dotted: the target)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend([Patch(color=VERDICT_COLOUR[v], alpha=0.8) for v in ("out of reach", "room")],
              [f"{v}: the most a kernel as fast as a copy could be ahead" for v in ("out of reach", "room")],
              fontsize=7, loc="upper right")
    n = {v: sum(r["verdict"] == v for r in rows) for v in order}
    ax.set_title(f"{len(rows)} rows short in some run: {n['out of reach']} out of reach, {n['room']} with room, "
                 f"{n['no floor']} without a floor", fontsize=10, loc="left")
    return fig


__all__ = ["RECORDED_FLOOR", "floor_cases", "load_floor", "reach_rows", "reach_table", "reach_summary", "plot_reach"]
