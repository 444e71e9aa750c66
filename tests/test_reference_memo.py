"""The reference's memo answers only what the same model would answer: same weights, same code."""

from __future__ import annotations

import torch

from mambalab.engine.core import Engine, EngineConfig
from mambalab.lab import reference as R
from mambalab.lab.bugs import BugConfig


def _engine(seed: int = 0) -> Engine:
    e = Engine(EngineConfig(model_seed=seed), BugConfig())
    e.add_request("a", [1, 2, 3, 4, 5], 3)
    e.add_request("b", [7, 1, 2], 2)
    e.run()
    return e


def test_judge_from_the_memo_is_the_judge_without_it(monkeypatch):
    e = _engine()
    first = R.judge(e)
    hits = R._MEMO.hits
    again = R.judge(_engine())  # a new engine, the same model: answered from the memo
    assert R._MEMO.hits > hits and again == first and first.ok
    key = R._MEMO.model_key(e.model)
    assert R.reference_output(e, [1, 2, 3, 4, 5], 3, key) == e.model.greedy_ref([1, 2, 3, 4, 5], 3)


def test_the_memo_key_follows_the_weights_and_the_code(monkeypatch):
    e = _engine()
    key = R._MEMO.model_key(e.model)
    assert R._MEMO.model_key(_engine().model) == key
    assert R._MEMO.model_key(_engine(seed=1).model) != key
    other = _engine()
    assert isinstance(other.model.embed, torch.Tensor)
    other.model.embed.add_(1)  # weights changed in place: another key
    assert R._MEMO.model_key(other.model) != key
    import mambalab.model.tiny_hybrid as th

    orig = th.TinyHybridModel.greedy_ref
    monkeypatch.setattr(th.TinyHybridModel, "greedy_ref", lambda self, *a: orig(self, *a))  # a plant
    assert R._MEMO.model_key(e.model) != key
