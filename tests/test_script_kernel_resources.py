"""``scripts/kernel_resources.py``: it compiles, for an sm_90 GPU on this CPU machine, the launch the GPU machine runs.

The script catches each wrapper's launch on CPU tensors. Every launch rule that asks whether the tensors are on a
GPU must answer yes there (``as_gpu``), or the caught launch is the interpreter's several-heads kernel: a tile of
32 heads whose compile does not finish, as happened once. It runs in its own process, because it stands in for the
CUDA driver.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "kernel_resources.py"

# (case, batch) -> the kernel the GPU launches there (the launch rules of mamba_ssm.py, gated_delta_rule.py,
# causal_conv1d.py) and the launch flags it must carry
EXPECTED = {
    ("ssu-bf16", 64): ("_ssu_kernel", {"USE_PDL"}),
    ("ssu-fp32", 1): ("_ssu_kernel", {"USE_PDL", "EARLY_STATE", "HEADS_FIRST"}),
    ("ssu-bf16-element", 64): ("_ssu_untied_reqs_kernel", {"USE_PDL", "HEADS_FIRST", "FAST_SOFTPLUS"}),
    ("ssu-bf16-spec4", 64): ("_ssu_kernel", {"USE_PDL", "FAST_SOFTPLUS"}),
    ("gdn-bf16", 64): ("_gdn_stream_kernel", {"USE_PDL", "EARLY_STATE", "EARLY_ONE"}),  # the first block early
    ("gdn-fp32", 1): ("_gdn_decode_kernel", {"USE_PDL", "EARLY_STATE"}),
    ("gdn-fp32", 16): ("_gdn_stream_kernel", {"USE_PDL", "EARLY_STATE", "RAW_QK"}),  # q, k as loaded (STREAM_RAW_QK)
    ("conv-bf16", 64): ("_causal_conv1d_decode_kernel", {"TRIGGER"}),  # PDL's trigger only (DECODE_TRIGGER)
    ("conv-fp32", 1): ("_causal_conv1d_decode_kernel", {"USE_PDL"}),  # one request: no interpreter row kernel
}


def _ptxas_available() -> bool:
    import triton

    return (Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas").exists()


def _rows(batch: int, cases: list[str], *extra: str) -> dict[str, list[str]]:
    run = subprocess.run([sys.executable, str(SCRIPT), "--batch", str(batch), "--cases", ",".join(cases), *extra],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = {}
    for line in run.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8 and cells[0] in ("ssu", "gdn", "conv"):
            rows[f"{cells[0]}-{cells[1]}"] = cells
    return rows


@pytest.mark.skipif(not _ptxas_available(), reason="this Triton has no bundled ptxas")
@pytest.mark.parametrize("batch", sorted({b for _, b in EXPECTED}))
def test_the_caught_launch_is_the_gpus_and_compiles(batch):
    cases = [case for case, b in EXPECTED if b == batch]
    rows = _rows(batch, cases)
    assert sorted(rows) == sorted(cases)
    for case in cases:
        kernel, flags = EXPECTED[(case, batch)]
        _, _, grid, launch, registers, _, local, sass = rows[case]
        assert f"`{kernel}`" in grid, (case, grid)
        assert "heads" not in grid and "requests" not in grid, (case, grid)  # never an interpreter kernel
        shown = set(re.findall(r"\b(USE_PDL|TRIGGER|EARLY_STATE|EARLY_ONE|RAW_QK|HEADS_FIRST|FAST_SOFTPLUS)\b", launch))
        assert shown == flags, (case, launch)
        assert 0 < int(registers) <= 255 and int(local) == 0 and int(sass) > 100, (case, rows[case])


@pytest.mark.skipif(not _ptxas_available(), reason="this Triton has no bundled ptxas")
def test_device_name_selects_that_cards_rules():
    """``--device-name``: the H100's GDN rule from 128 sequences (the general kernel, bf16 32 rows in one piece, fp32
    16 rows on 2 warps), compiled without spills; below 128 the H200's streaming kernel as without the name; the
    H100's SSU rule for a bf16 state and its 2 warps for per-element fp32; the H200's SSU rule from batch 16."""
    h100 = ("--device-name", "NVIDIA H100 80GB HBM3")
    rows = _rows(256, ["gdn-bf16", "gdn-fp32"], *h100)
    for case, bv, warps in (("gdn-bf16", 32, 1), ("gdn-fp32", 16, 2)):
        _, _, grid, launch, registers, _, local, _ = rows[case]
        assert "`_gdn_decode_kernel`" in grid and f"'BV': {bv}" in launch and "'SPLIT': 1" in launch, (case, launch)
        assert f"w={warps}" in launch and int(local) == 0 and 0 < int(registers) <= 255, (case, rows[case])
    assert "`_gdn_stream_kernel`" in _rows(64, ["gdn-bf16"], *h100)["gdn-bf16"][2]
    # the SSU's H100 rule (bf16, one token): heads first at every batch, 32 rows on 4 warps up to batch 8
    for batch, rows_, warps in ((8, 32, 4), (64, 16, 1)):
        _, _, grid, launch, registers, _, local, _ = _rows(batch, ["ssu-bf16"], *h100)["ssu-bf16"]
        assert f"'BLOCK_M': {rows_}" in launch and f"w={warps}" in launch and "HEADS_FIRST" in launch, (batch, launch)
        assert int(local) == 0 and 0 < int(registers) <= 255, (batch, registers)
    assert "HEADS_FIRST" not in _rows(64, ["ssu-bf16"])["ssu-bf16"][3]
    # the H200's: heads first from batch 16 only; the H100's per-element fp32 on 2 warps (the H200's table: 1)
    h200 = ("--device-name", "NVIDIA H200")
    assert [("HEADS_FIRST" in _rows(b, ["ssu-bf16"], *h200)["ssu-bf16"][3]) for b in (8, 16)] == [False, True]
    for name, warps in ((h100, 2), (h200, 1)):
        _, _, grid, launch, registers, _, local, _ = _rows(64, ["ssu-fp32-element"], *name)["ssu-fp32-element"]
        assert "'BLOCK_M': 4" in launch and f"w={warps}" in launch and int(local) == 0, (name, launch, local)
