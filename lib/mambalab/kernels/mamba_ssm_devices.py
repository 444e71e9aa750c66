"""Launch rules of the Mamba2 decode step (:func:`~mambalab.kernels.mamba_ssm.selective_state_update`) keyed by the
GPU's name, where one card measured other shapes than the H200.

:mod:`.mamba_ssm`'s table was measured on an H200. vLLM keys its tuned SSU configs by device name the same way
(``vllm/model_executor/layers/mamba/ops/configs/selective_state_update/...,device_name=NVIDIA_H100_80GB_HBM3,...json``
in 0.33); :mod:`.gated_delta_rule_devices` holds the GDN's. These rules cover one token a request with ``A``/``dt``
per head (``mamba_mixer2``'s decode call) and a 16-bit state, (:data:`SSU_UNTIED_DEVICE_WARPS`) ``A``/``dt`` per
element with an fp32 state, (:data:`SSU_EARLY_HALF`) which row blocks of an fp32 state read it before PDL's wait,
and (:data:`SSU_EARLY_SLOT`) where the source slot alone is read before it.
Not a mirror of an upstream file.

NVIDIA H100 80GB HBM3, bf16 state and activations, A/B interleaved beside vLLM 0.33 with the agreement gate
(``docs/results/issue14-call17{2,3}-*.{py,txt}``; docs/benchmarks.md, "Calls 171-176"), vLLM's time over ours, in
call 172 (call 173 measured the same within 1%; its recording: SSU bf16 at 64-512 90.3-94.7 -> 95.0-99.9% of copy):

* the grid walks a slot's heads together, the requests zigzagged (as the fp32 state's grid does on every card):
  batch 32 / 64 / 256 1.028 / 1.014 / 1.000 -> 1.079 / 1.073 / 1.072x, 9 -> 16 1.111 -> 1.143x, 8 / 9 1.081 /
  1.064 -> 1.087 / 1.072x. Before the zigzag (calls 79-80) the padded rows of a CUDA graph ran as a tail and lost
  9 -> 16, so the H200's table leaves this grid to the fp32 state.
* up to 8 x 128 request x heads (batch 8 of a 128-head layer), the state read before PDL's wait, 8 KiB a program
  (32 rows) on 4 warps, the copy floor's fastest shape there (call 166): 8 / fresh 8 1.087 / 1.089 -> 1.100 /
  1.101x; after a torch kernel that does not trigger PDL 0.980 / 0.976 -> 1.012 / 1.007x. (The early load alone,
  without the heads-first grid, is even with the table at 4-16: call 123 on an H200, call 172.) The cost: at batch 1 / 2,
  after a torch kernel, 0.925 / 0.986 -> 0.896 / 0.974x (call 173; in the bench 1.525 / 1.428 -> 1.552 / 1.466x).

NVIDIA H200, the same A/B (call 179, ``docs/results/issue14-call179-ssu-bf16-rule-h200.{txt,json}``): heads first
with the zigzag from batch 16: 16 / 64 / 256 / 512 1.049 / 1.074 / 1.077 / 1.045 -> 1.074 / 1.092 / 1.104 / 1.078x,
57 -> 64 1.071 -> 1.091x; below 16 it lost (8 / fresh 8 1.094 / 1.091 -> 1.071 / 1.071x), as did the 9 -> 16 of a
CUDA graph (1.446 -> 1.427x; after a torch kernel 1.335 -> 1.316x) and ``z`` at 64 (1.074 -> 1.067x), which the
rule takes as the price of 16. The H100's small-batch part (its tile with the state read early) lost at 4 / 8 there
(1.137 / 1.094 -> 1.110 / 1.065x), so the H200 reads early only where the table does. Its recording with the rule
(call 180): SSU bf16 at 64-512 90.3-95.2 -> 92.0-98.2% of copy.
The L2 hint before PDL's wait (``mamba_ssm.PREFETCH_STATE``) starts at 17 x 128 request x heads on the H200
(call 191: in the layer it lost at 8-16); on the H100 it stays from the first batch the small part leaves (call 193,
``docs/results/issue14-call193-ssu-hint-range-h100.txt``, from 1 against from 17 x 128: the bench at 9 / 16 / 9 -> 16
1.073 / 1.059 / 1.093 -> 1.093 / 1.073 / 1.149x; the layer, conv then SSU, at 9 / 9 -> 16 1.150 / 1.165 -> 1.139 /
1.176x, 16 even). From 8 to 16 x 128 request x heads the H200 runs the H100's tile, 32 rows (8 KiB) on 4 warps,
without the early load (call 197, ``docs/results/issue14-call197-ssu-bf16-floor-shape.txt``, the tile pinned: the
bench at 8 / fresh 8 / 9 1.060 / 1.063 / 1.047 -> 1.080 / 1.082 / 1.069x, the layer at 8 / 9 1.090 / 1.148 -> 1.112 /
1.175x; 8 warps or 64 rows slower; at 16 even with the table's tile, which the heads-first grid beats). Call 202
(``docs/results/issue14-call202-ssu-bf16-16.txt``) measured the rest: at 10 / 12 / 15 the tile against the table's
1.041 / 1.039 / 1.036 -> 1.062 / 1.042 / 1.036x (layer pairs at 12 / 15 1.130 / 1.123 -> 1.139 / 1.127x), and at
16 x 128 the tile under the heads-first grid, the two rules together: the CUDA graph's 9 -> 16 1.379 -> 1.462x
(after a torch kernel 1.335 -> 1.393x), a full 16 even (1.057 / 1.054x; layer 1.151 / 1.153x; fresh pools 1.053 /
1.054x), so the tile runs to 16 x 128. Every other card keeps the table. The table is keyed by element size, as
:mod:`.gated_delta_rule_devices`' is: an fp16 state takes the rule unmeasured.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from mambalab.kernels.common import device_name


class SSUDeviceRule(NamedTuple):
    """One token a request, ``A``/``dt`` per head: the heads-first grid from ``heads_first_min`` to
    ``heads_first_max`` request x heads; from ``small_min`` to ``small_max`` request x heads tiles of ``small_rows``
    rows on ``small_warps`` warps, with the state read before PDL's wait (under the ``early_state_load`` promise)
    where ``small_early``."""

    heads_first_max: int
    small_max: int
    small_rows: int
    small_warps: int
    heads_first_min: int = 0
    prefetch_min: int | None = None  # the L2 hint from this many request x heads (None: mamba_ssm.PREFETCH_STATE's)
    small_min: int = 0
    small_early: bool = True  # False: the table's early-load range stands (mamba_ssm.EARLY_STATE_MAX_REQUEST_HEADS)

    def small(self, request_heads: int) -> bool:
        """Whether a launch of ``request_heads`` request x heads takes the rule's small tile."""
        return self.small_min <= request_heads <= self.small_max

    def heads_first(self, request_heads: int) -> bool:
        """Whether a launch of ``request_heads`` request x heads walks a slot's heads together."""
        return self.heads_first_min <= request_heads <= self.heads_first_max


# device name (torch.cuda.get_device_name) -> state element size -> rule
SSU_DEVICE_RULES: dict[str, dict[int, SSUDeviceRule]] = {
    "NVIDIA H100 80GB HBM3": {2: SSUDeviceRule(1 << 30, 8 * 128, 32, 4, prefetch_min=1)},
    "NVIDIA H200": {2: SSUDeviceRule(1 << 30, 16 * 128, 32, 4, heads_first_min=16 * 128, small_min=8 * 128,
                                     small_early=False)},
}


def _for_card(table: dict, device: torch.device, state_element_size: int):
    """``table``'s entry for ``device``'s name and the state's element size, or None (no name: the interpreter)."""
    return table.get(device_name(device) or "", {}).get(state_element_size)


def _in_card_span(table: dict, device: torch.device, state_element_size: int, request_heads: int) -> bool:
    """Whether ``request_heads`` lies in ``table``'s ``(fewest, most)`` span for ``device`` and the element size."""
    span = _for_card(table, device, state_element_size)
    return span is not None and span[0] <= request_heads <= span[1]


# A/dt per element, one token (the untied kernel): device name -> state element size -> (fewest request x heads, warps
# a program on the table's tile). NVIDIA H100 80GB HBM3, fp32 state, bf16 activations, 4 rows on 2 warps against the
# table's 1 (call 181, docs/results/issue14-call181-ssu-el-warps-h100.txt): batch 16 / 64 / 128 / 256 / 512 1.019 /
# 1.011 / 1.001 / 1.003 / 0.993 -> 1.022 / 1.023 / 1.014 / 1.018 / 1.008x. On an H200 the same shape lost 1.6-2.4%
# (call 178), so the H200 keeps one warp. Batch 8, the rule's first, was not in the A/B; in the H100's recording with
# the rule (call 182) it read 1.041x (1.032x in call 173).
SSU_UNTIED_DEVICE_WARPS: dict[str, dict[int, tuple[int, int]]] = {
    "NVIDIA H100 80GB HBM3": {4: (8 * 128, 2)},
}


def ssu_untied_warps(device: torch.device, state_element_size: int, tied: bool, one_token: bool,
                     request_heads: int) -> int | None:
    """Warps a program for a one-token launch with ``A``/``dt`` per element on ``device``, or None (the table's)."""
    if tied or not one_token:
        return None
    rule = _for_card(SSU_UNTIED_DEVICE_WARPS, device, state_element_size)
    return rule[1] if rule is not None and request_heads >= rule[0] else None


# One token, A/dt per head, under the layer's early_state_load: the state read before PDL's wait by the even row blocks
# only, the odd ones reading theirs after it (``EARLY_HALF``), so state bytes move while the even blocks wait on their
# token. Call 228's token floor (a slot copy whose stores wait on a word read after the wait) found that shape the
# fastest copy in 23 of the 28 rows it timed, and no slower than a copy without a token. Device name -> state element
# size -> (fewest, most request x heads). NVIDIA H200, fp32 state, beside vLLM 0.33 (call 230,
# docs/results/issue14-call230-half-early-range.txt; vLLM's time over ours, the table's 8 rows on 2 warps, bench /
# after a torch kernel / as a layer runs it, the conv first): batch 5 1.045 -> 1.113x / 0.980 -> 0.978x / -, 6 1.037 ->
# 1.092x / 0.998x both / 1.107 -> 1.138x, 8 1.037 -> 1.087x / 0.994 -> 1.000x / 1.096 -> 1.132x, with z at 8 1.071 ->
# 1.112x / 1.036 -> 1.033x, fp32 activations at 8 1.058 -> 1.096x / 1.005 -> 1.006x. Not at 4 (call 229: the bench
# +4.5%, after a torch kernel -1.4%, the layer -0.6%), from 9 (16-row tiles: the bench +1-2%, after a torch kernel
# -0.8 to -3%), for a bf16 state (4-16: after a torch kernel -5 to -14%), nor several tokens (fp32 T = 2-4 at 8:
# +0.1-1%, after a torch kernel -0.3-0.5%). No other card measured.
SSU_EARLY_HALF: dict[str, dict[int, tuple[int, int]]] = {"NVIDIA H200": {4: (5 * 128, 8 * 128)}}


def ssu_early_half(device: torch.device, state_element_size: int, tied: bool, one_token: bool,
                   request_heads: int) -> bool:
    """Whether a launch on ``device`` reads the odd row blocks' state after PDL's wait (:data:`SSU_EARLY_HALF`);
    the launch then reads the rest before it under the layer's ``early_state_load`` promise, whatever the table's
    early range."""
    return tied and one_token and _in_card_span(SSU_EARLY_HALF, device, state_element_size, request_heads)


# Under PDL where the state is not read before the wait, the source slot alone is (``EARLY_SLOT``, under the layer's
# early_state_load promise): the wait is then followed at once by the state's loads instead of the index's round trip,
# for the programs that start before the previous kernel ends, a CUDA graph's padded rows among them. A/dt per head,
# one token or several. Device name -> state element size -> (fewest, most request x heads). NVIDIA H200, fp32 state,
# beside vLLM 0.33 (call 266, docs/results/issue14-call266-ssu-early-slot.txt; vLLM's time over ours, bench / after a
# torch kernel): 9 -> 16 with bf16 activations 1.086 -> 1.095x / 1.059 -> 1.063x, with fp32 ones 1.083 -> 1.093x /
# 1.054 -> 1.055x, as a layer runs it (the conv first) 1.143 -> 1.150x; 9 1.033 -> 1.037x / 1.009 -> 1.015x (fp32
# activations 1.045 -> 1.049x / 1.011 -> 1.007x); 16 within 0.3% (bf16 / fp32 activations 1.059 / 1.056 -> 1.061 /
# 1.054x, after a torch kernel -0.2 / -0.1%; z 1.054 -> 1.056x; layer even); T = 2 / 4 at 16 1.047 / 1.051 -> 1.051 /
# 1.054x / 1.052 / 1.047 -> 1.058 / 1.048x. From 32 to 272 within 0.2% (one token, z, fp32 activations, T = 2 at 64,
# layer at 64): not taken there, nor for a bf16 state (13 / 16 / 9 -> 16: +0.2 / +0.2 / +0.7% in the bench, -0.3 /
# -0.4 / -0.6% after a torch kernel, layer even). Call 269, as shipped, two passes (issue14-call269-*.txt): 9 -> 16
# 0.6-0.9% faster in the bench, 0.9-1.0% as a layer runs it. No other card measured.
SSU_EARLY_SLOT: dict[str, dict[int, tuple[int, int]]] = {"NVIDIA H200": {4: (9 * 128, 16 * 128)}}


def ssu_early_slot(device: torch.device, state_element_size: int, tied: bool, request_heads: int) -> bool:
    """Whether a launch on ``device`` that reads its state after PDL's wait reads its source slot before it
    (:data:`SSU_EARLY_SLOT`), under the layer's ``early_state_load`` promise."""
    return tied and _in_card_span(SSU_EARLY_SLOT, device, state_element_size, request_heads)


def ssu_device_rule(device: torch.device, state_element_size: int, tied: bool, one_token: bool) -> SSUDeviceRule | None:
    """The rule for a launch on ``device`` or None (the H200's table applies): one token, ``A``/``dt`` per head."""
    if not (tied and one_token):
        return None
    return _for_card(SSU_DEVICE_RULES, device, state_element_size)
