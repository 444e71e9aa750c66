"""The bench's agreement gate (:func:`mambalab.gpu.bench_cases.agreement`) catches an output element an
implementation leaves unwritten, also where the implementation allocates its output itself (speculative GDN:
``fused_sigmoid_gating_delta_rule_update`` takes no ``out``, upstream's nor ours). GPU only: the cases live there."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.cuda


def _spec_case(broken: str | None):
    from mambalab.gpu.bench_cases import GDNCase

    class Case(GDNCase):
        def call(self, impl, pool, bugs=None):
            if broken is None:
                return super().call(impl, pool, bugs)
            first = torch.empty(self.out_bytes, dtype=torch.uint8, device="cuda")  # the pool's first allocation
            o = super().call(impl, pool, bugs)
            if broken == "unwritten":  # the poisoned block as the output, its last element never written
                mine = first.view(o.dtype).view(o.shape)
                mine.view(-1)[:-1] = o.reshape(-1)[:-1]
                self.out = mine
            return self.out

    return Case(3, 3, torch.bfloat16, torch.bfloat16, True, "cloned", tokens=2)


def test_spec_gdn_output_is_poisoned_and_agrees():
    from mambalab.gpu.bench_cases import agreement

    ok, msg = agreement(_spec_case(None), ["mambalab"])
    assert ok, msg


def test_an_unwritten_element_of_an_allocated_output_fails_the_gate():
    from mambalab.gpu.bench_cases import agreement

    ok, msg = agreement(_spec_case("unwritten"), ["mambalab"])
    assert not ok and "non-finite outputs" in msg, msg


def test_an_output_outside_the_poisoned_allocation_fails_the_gate():
    from mambalab.gpu.bench_cases import agreement

    ok, msg = agreement(_spec_case("after-scratch"), ["mambalab"])
    assert not ok and "not in the poisoned allocation" in msg, msg


def test_poisoned_allocations_hand_out_nan():
    from mambalab.gpu.bench_cases import poisoned_allocations

    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        poisoned = poisoned_allocations(4096)
        with poisoned:
            t = torch.empty(4096 // dtype.itemsize, dtype=dtype, device="cuda")
        assert poisoned.holds(t) and bool(torch.isnan(t.float()).all()), dtype
        del t, poisoned
