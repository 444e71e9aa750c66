"""The interpreter cache's replayed language patch: the same assignments as the interpreter's own
patch, everything restored after the launch, and a fall-back when the language was rebound."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from mambalab.device import INTERPRET
from mambalab.lab import interpreter_cache, sanitizer

pytestmark = [pytest.mark.skipif(not INTERPRET, reason="the interpreter's patching only"),
              pytest.mark.usefixtures("no_launch_memo")]  # every launch runs the interpreter


@triton.jit
def _double(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2.0 + tl.sum(tl.load(x_ptr + offs), axis=0) * 0.0)


def _language() -> dict:
    mods = (tl, tl.core, tl.math, tl.tensor, tl.core.tensor_descriptor_base)
    return {(id(m), k): v for m in mods for k, v in vars(m).items()}


def _launch() -> torch.Tensor:
    x = torch.arange(8, dtype=torch.float32)
    y = torch.zeros(8)
    sanitizer.launch(_double, (1,), x, y, N=8)
    return y


def _left_by(launch) -> set:
    """The language attributes a launch leaves other than it found them (Triton's interpreter does
    not restore every one it patches; the replay must leave the same ones)."""
    before = _language()
    launch()
    after = _language()
    return {k for k in before if after.get(k) is not before[k]}


def test_replayed_patch_computes_the_same_and_leaves_the_language_as_the_interpreter_does():
    interpreter_cache._RECORDED.clear()
    _launch()  # recorded
    assert interpreter_cache._RECORDED, "the first launch records its patch"
    replayed = _left_by(_launch)
    interpreter_cache._RECORDED.clear()
    plain = _left_by(_launch)  # the interpreter's own patch (recorded again)
    assert replayed == plain
    assert torch.equal(_launch(), torch.arange(8, dtype=torch.float32) * 2)


def test_a_rebound_language_falls_back_to_the_interpreter_s_patch(monkeypatch):
    _launch()
    assert interpreter_cache._RECORDED
    orig_sum = tl.sum
    seen = []

    def spy_sum(*a, **k):
        seen.append(1)
        return orig_sum(*a, **k)

    spy_sum.__triton_builtin__ = True  # a builtin, as the interpreter tells one
    monkeypatch.setattr(tl, "sum", spy_sum)
    y = _launch()
    assert seen, "the interpreter patched the rebound function, not the recorded one"
    assert torch.equal(y, torch.arange(8, dtype=torch.float32) * 2)
    monkeypatch.undo()
    assert tl.sum is orig_sum


def test_a_builtin_s_replayed_wrapper_calls_as_the_interpreter_s_lambda():
    """The replay puts a wrapper without the lambda's dict comprehension: the same call, argument for
    argument and keyword for keyword in the same order, ``_semantic`` always the interpreter's, last."""
    from triton.runtime import interpreter as interp

    interpreter_cache._INTERP = interp
    code = interpreter_cache._patch_attr_lambda()
    assert code is not None, "the interpreter's wrapper has the expected shape"
    member = lambda *a, **k: (a, list(k.items()))  # noqa: E731
    scope = interp._LangPatchScope()
    holder = type("holder", (), {})
    interp._patch_attr(holder, "f", member, None, scope)
    theirs = holder.f
    ours = interpreter_cache._builtin_call(theirs, code)
    assert ours is not theirs
    other = lambda *a, **k: ("other", a, list(k.items()))  # noqa: E731
    for args, kwargs in [((), {}), ((1, 2), {}), ((1,), {"axis": 0, "_semantic": "mine", "keep_dims": True}),
                         ((), {"_semantic": None}), ((3,), {"member": other, "x": 1})]:
        assert ours(*args, **dict(kwargs)) == theirs(*args, **dict(kwargs))
    assert ours(1, axis=0)[1][-1] == ("_semantic", interp.interpreter_semantic)
    assert interpreter_cache._builtin_call(member, code) is member  # anything else is put as it is
