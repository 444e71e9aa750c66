"""The launch memo and fresh outputs (``fresh_outputs``: tensors a wrapper has just allocated with
``torch.empty``): a hit writes them even where the first launch found its result there already."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from mambalab.lab import sanitizer

pytestmark = pytest.mark.cpu_only(reason="the memo serves Triton's interpreter only")


@triton.jit
def _scaled(x_ptr, o_ptr, a, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(o_ptr + offs, a * tl.load(x_ptr + offs))


def test_a_fresh_output_is_written_on_a_hit_even_where_its_garbage_held_the_result_already(memo):
    """``torch.empty`` may hand out the freed buffer of an identical earlier launch, holding the very bytes
    the launch writes: the launch changes nothing there, yet a later hit must write them into its own
    output (seen in a DP engine's captures: a graph's output left uninitialised)."""
    x = torch.randn(8, generator=torch.Generator().manual_seed(5))
    # The process's first interpreted launch leaves Triton's language patched a little differently than it
    # found it (tests/test_interpreter_cache.py), which is part of the code key: launch once beforehand.
    sanitizer.launch(_scaled, (1,), torch.zeros(8), torch.empty(8), 1.0, N=8)
    misses = memo.misses
    want = 0.5 * x
    recycled = want.clone()  # the garbage equals what the launch writes
    sanitizer.launch(_scaled, (1,), x, recycled, 0.5, N=8, fresh_outputs=(recycled,))
    assert torch.equal(recycled, want)
    other = torch.full((8,), float("nan"))  # other garbage
    sanitizer.launch(_scaled, (1,), x, other, 0.5, N=8, fresh_outputs=(other,))
    assert (memo.misses - misses, memo.hits) == (1, 1)
    assert torch.equal(other, want)
