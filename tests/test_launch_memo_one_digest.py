"""The launch memo digests the kernels' code once per launch (``lab/launch_memo.py``): the key taken before the
run stands when the run added no name to the modules the key describes, and a run that added one (a kernel's
first interpreted launch: Triton's helpers) is stored under the code as the run left it, so the next launch finds
it."""

from __future__ import annotations

import sys

import pytest
import torch
import triton
import triton.language as tl

from mambalab.lab import launch_memo, sanitizer

pytestmark = pytest.mark.cpu_only(reason="the memo serves Triton's interpreter only")


@triton.jit
def _scale(x_ptr, a, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(x_ptr + offs, a * tl.load(x_ptr + offs))


def _counting(monkeypatch):
    calls = []
    real = launch_memo._code_key

    def counted(fn):
        calls.append(fn)
        return real(fn)

    monkeypatch.setattr(launch_memo, "_code_key", counted)
    return calls


def test_a_run_that_adds_no_name_is_digested_once(memo, monkeypatch):
    x = torch.ones(8)
    sanitizer.launch(_scale, (1,), x, 2.0, N=8)  # the kernel's first launch: whatever it adds is added now
    calls = _counting(monkeypatch)
    sanitizer.launch(_scale, (1,), x, 3.0, N=8)  # a miss (another factor)
    assert len(calls) == 1 and memo.misses == 2
    sanitizer.launch(_scale, (1,), torch.full((8,), 2.0), 3.0, N=8)  # the same inputs as the last launch
    assert memo.hits == 1 and torch.equal(x, torch.full((8,), 6.0))


def test_a_run_that_adds_a_name_is_stored_under_the_code_it_left(memo, monkeypatch):
    x = torch.ones(8)
    sanitizer.launch(_scale, (1,), x, 2.0, N=8)
    module = sys.modules[__name__]
    real = sanitizer._launch

    def adding(*a, **k):  # as Triton's first interpreted launch of a kernel adds its helpers to the kernel's module
        monkeypatch.setattr(module, "_added_by_the_run", object(), raising=False)
        return real(*a, **k)

    monkeypatch.setattr(sanitizer, "_launch", adding)
    calls = _counting(monkeypatch)
    sanitizer.launch(_scale, (1,), torch.ones(8), 5.0, N=8)
    assert len(calls) == 2  # before the run, and again after it: a name was added
    monkeypatch.setattr(sanitizer, "_launch", real)
    y = torch.ones(8)
    sanitizer.launch(_scale, (1,), y, 5.0, N=8)  # the code as the run left it: found
    assert memo.hits == 1 and torch.equal(y, torch.full((8,), 5.0))
