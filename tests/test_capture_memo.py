"""The CPU capture memo's key never confuses two functions (``worker/cuda_graph.py``)."""

import gc

import pytest

import mambalab.worker.cuda_graph as cg


def test_an_id_in_a_key_is_never_reused_by_a_new_function():
    # A plant that is collected must not lend its id to the next one: the next would be
    # served the first one's captures (seen: three guards of the mechanism grid on one key).
    mod = cg
    name = "_memo_test_plant"
    keys, ids = set(), set()
    for value in range(50):
        f = eval(f"lambda: {value}")  # a fresh function (and code object) each time
        setattr(mod, name, f)
        keys.add(cg._code_fingerprint())
        leaves, _ = cg._reach(f)
        ids.add(leaves[0][3])
        delattr(mod, name)
        del f
        gc.collect()
    assert len(keys) == 50  # every plant is another key
    assert len(ids) == 50  # and every code object another id


def test_pinning_returns_the_id_of_a_live_object():
    obj = object()
    assert cg._pinned_id(obj) == id(obj)
    assert cg._PINNED[id(obj)] is obj


@pytest.mark.cpu_only(reason="the capture memo serves the interpreter's stand-in graphs; a GPU captures real CUDA graphs")
def test_code_fingerprint_once_per_engine(monkeypatch):
    """An engine's start-up fingerprints mambalab's code once for all its captures' keys; outside such a
    block every key fingerprints afresh, so a plant entered between two keys is seen."""
    from mambalab.engine.core import Engine
    from mambalab.lab.scenarios import guard_lt_zero

    calls = []
    real = cg._code_fingerprint
    monkeypatch.setattr(cg, "_code_fingerprint", lambda: calls.append(1) or real())
    engine = Engine(guard_lt_zero(0).cfg)
    assert sum(len(r.runner.graphs) for r in engine.ranks) >= 2 and len(calls) == 1
    with cg.code_fingerprint_once():
        first = cg._code_digest()
        monkeypatch.setattr(cg, "_memo_test_plant", lambda: 0, raising=False)
        assert cg._code_digest() == first and len(calls) == 2  # inside: the block's one fingerprint
    assert cg._code_digest() != first and len(calls) == 3  # outside: the plant is part of the key
