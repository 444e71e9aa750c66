"""The GDN general kernel's early store-slot load (``gated_delta_rule.SPEC_EARLY_DST``, sequences by element
size: with one slot a token, each token's store slot is loaded, masked to the index row, with the token's inputs
instead of after its output) against the kernel without it: the same bytes on the interpreter, within rounding on a
GPU, the reference, untouched slots. The rule is GPU-only (``_gpu_rules_on``) and forced here, with one head a program
and the streaming kernels off, so every launch is the general kernel's.
"""

from __future__ import annotations

import pytest
import torch

from mambalab.kernels import gated_delta_rule as gdn
from mambalab.kernels.gated_delta_rule import fused_recurrent_gated_delta_rule
from mambalab.lab.bugs import BugConfig

from test_kernel_gated_delta_rule import _gen
from test_kernel_gdn_prologue import STATE_DTYPES, _same, general_kernel_launches
from test_kernel_gdn_spec_stream import _check, _spec_case


@pytest.fixture
def launched(monkeypatch):
    return general_kernel_launches(monkeypatch, "EARLY_DST")


@pytest.mark.parametrize("dtype,state_dtype", STATE_DTYPES)
@pytest.mark.parametrize("cols,lens,num_acc,stages", [
    (3, [3, 0, 1, 3, 2], [2, 1, 1, 3, 0], 0), (4, [4] * 5, [1, 4, 2, 3, 1], 0), (2, [3, 2, 1], [0, 2, 1], 0),
    pytest.param(4, [4] * 5, [1, 4, 2, 3, 1], 3, marks=pytest.mark.cuda)],  # tl.range: a GPU's loop
    ids=["3-cols-varlen", "4-cols", "more-tokens-than-cols", "4-cols-stages"])
def test_spec_early_dst(cols, lens, num_acc, stages, dtype, state_dtype, launched, monkeypatch):
    """Empty and short sequences, a sequence longer than its index row (its last token stores nothing), a count of
    0 (the null block under the fixed bound), and the pipelined token loop."""
    monkeypatch.setattr(gdn, "SPEC_TOKEN_STAGES", {state_dtype.itemsize: stages} if stages else {})
    monkeypatch.setattr(gdn, "SPEC_TOKEN_STAGES_MIN_N", 1)
    gen = _gen(700 + 10 * cols + len(lens) + stages)
    args, pool, kw = _spec_case(gen, lens, num_acc, cols, dtype, state_dtype, V=20)
    results = []
    for on in (False, True):
        monkeypatch.setattr(gdn, "SPEC_EARLY_DST", {state_dtype.itemsize: 1 << 30} if on else {})
        p = pool.clone()
        o, final = fused_recurrent_gated_delta_rule(*args, initial_state=p, bugs=BugConfig.fixed(), **kw)
        results.append((o, p, final))
    _same(results, state_dtype)
    assert [e for _, e in launched[-2:]] == [False, True]
    _check(args, pool, kw, dtype, state_dtype, untouched=all(n > 0 for n in lens))


def test_the_shipped_rule():
    assert gdn.SPEC_EARLY_DST == {2: 64, 4: 8}  # call 64: bf16 to 64 sequences, fp32 to 8
