"""The references computed in a second process (``lab/reference_pool.py``): the same answers as here, bit for
bit, and never an answer this process would not compute (another code here, a drafter, a forgotten memo,
a dead worker)."""

import os
import signal
import time

import pytest
import torch

from mambalab.device import DEVICE_TYPE
from mambalab.engine.core import Engine
from mambalab.lab import reference as R
from mambalab.lab import reference_pool as rp
from mambalab.lab import scenarios
from mambalab.lab.bugs import BugConfig
from mambalab.model import tiny_hybrid

pytestmark = pytest.mark.skipif(DEVICE_TYPE != "cpu", reason="the pool serves the CPU only (its reference runs "
                                                              "where the model is)")


def _ready(pool: rp.ReferencePool, seconds: float = 90.0) -> rp.ReferencePool:
    assert pool.start(), pool.broken
    deadline = time.monotonic() + seconds
    while not pool.ready and time.monotonic() < deadline:
        pool.poll(0.2)
    assert pool.ready and pool.usable(), (pool.broken, pool.fingerprint)
    return pool


@pytest.fixture
def pool(monkeypatch):
    monkeypatch.setenv("MAMBALAB_REFERENCE_POOL", "1")
    # at the normal priority: under `make test` xdist keeps both cores busy, and an idle-class start-up would wait
    # for a free core (the idle class is tested on its own below)
    monkeypatch.setattr(rp, "START_IDLE", False)
    p = _ready(rp.ReferencePool())
    monkeypatch.setattr(rp, "GRACE_S", 60.0)  # answers are waited for here (a busy test machine): see test_a_late
    monkeypatch.setattr(R, "_POOL", p)  # reference_submit and the memo ask this one
    R.clear_reference_memo()
    yield p
    p.close()
    R.clear_reference_memo()


def _requests(wl):
    return [(list(ev.prompt), ev.max_tokens) for s in sorted(wl.events) for ev in wl.events[s]
            if getattr(ev, "prompt", None) and hasattr(ev, "max_tokens")]


def test_the_worker_answers_what_this_process_computes_bit_for_bit(pool):
    for build, seed in ((scenarios.move_row_stale_source, 0), (scenarios.move_row_stale_source, 3),
                        (scenarios.stale_rows, 1)):
        wl = build(seed)
        eng = Engine(wl.cfg, BugConfig())
        mkey = R.model_key(eng.model)
        for prompt, max_tokens in _requests(wl):
            assert pool.submit(eng.model, mkey, tuple(prompt), R._reference_length(eng, prompt, max_tokens),
                               with_state=True)
        assert pool.wait(60)
        for prompt, max_tokens in _requests(wl):
            n = R._reference_length(eng, prompt, max_tokens)
            got = pool.take((mkey, f"greedy {n}", tuple(prompt)))
            want = tuple(eng.model.greedy_ref(prompt, n))
            assert got == want
            if not want:
                continue
            state = pool.take((mkey, "state", tuple(prompt) + want[:-1]))
            ref = eng.model.forward_ref(prompt + list(want[:-1]))[1]
            assert state.keys() == ref.keys()
            for k in ref:
                assert state[k].dtype == ref[k].dtype and state[k].shape == ref[k].shape
                assert state[k].requires_grad == ref[k].requires_grad
                assert torch.equal(state[k], ref[k]), k
    assert pool.served > 0 and pool.broken is None


def test_a_session_with_the_pool_sees_and_judges_as_one_without(pool, monkeypatch):
    from mambalab.widgets.session import Session

    wl = scenarios.move_row_stale_source(2)

    def run():
        s = Session(wl, BugConfig.with_bugs("move-row-stale-source"), label="m", fixed=False, seed=2)
        s.advance_to(4)
        assert set(s.expected) == set(s.engine.results) and len(s.expected) == 4
        for rid, res in s.engine.results.items():
            assert s.expected[rid] == s.engine.model.greedy_ref(res.prompt, res.max_tokens)
        at4 = (dict(s.expected), s.verdict_so_far(4))
        return at4, s.run_to_end().verdict.summary(), dict(s.expected)

    with_pool = run()
    assert pool.served >= 4
    R.clear_reference_memo()
    monkeypatch.setattr(pool, "usable", lambda: False)
    served = pool.served
    without = run()
    assert pool.served == served
    assert with_pool == without
    assert list(with_pool[0][0]) == list(without[0][0])  # the requests in the order they came


def test_the_model_code_patched_here_is_computed_here(pool, monkeypatch):
    """A monkeypatch of the code the reference runs makes the worker's answers another code's: the memo's key
    changes (its code digest), and the pool sends nothing while the fingerprints differ."""
    wl = scenarios.move_row_stale_source(1)
    eng = Engine(wl.cfg, BugConfig())
    prompt, max_tokens = _requests(wl)[0]
    n = R._reference_length(eng, prompt, max_tokens)
    plain = eng.model.greedy_ref(prompt, n)
    tiny_hybrid._REF_STATES.pop(eng.model, None)  # greedy_ref's kept states hold the unpatched logits

    logits = tiny_hybrid.TinyHybridModel._logits
    monkeypatch.setattr(tiny_hybrid.TinyHybridModel, "_logits", lambda self, h: -logits(self, h))
    mkey = R.model_key(eng.model)
    assert not pool.usable()
    assert R.reference_submit(eng, wl, mkey) == 0
    patched = R.reference_output(eng, prompt, max_tokens, mkey)
    tiny_hybrid._REF_STATES.pop(eng.model, None)
    assert pool.served == 0
    assert patched == eng.model.greedy_ref(prompt, n) != plain
    monkeypatch.undo()
    assert pool.usable()  # the very objects back: the same code again


def test_a_module_function_patched_here_is_computed_here(pool, monkeypatch):
    from mambalab.model import layers

    name = next(n for n in ("rms_norm",) if hasattr(layers, n))
    monkeypatch.setattr(layers, name, lambda *a, **k: None)  # never called: the fingerprint alone tells
    assert not pool.usable()


def test_forgotten_answers_are_never_served(pool):
    wl = scenarios.move_row_stale_source(4)
    eng = Engine(wl.cfg, BugConfig())
    mkey = R.model_key(eng.model)
    assert R.reference_submit(eng, wl, mkey) > 0
    prompt, max_tokens = _requests(wl)[0]
    key = (mkey, f"greedy {R._reference_length(eng, prompt, max_tokens)}", tuple(prompt))
    R.clear_reference_memo()  # the memo emptied: what the worker computes for it is dropped on arrival
    assert pool.take(key) is rp.MISSING
    time.sleep(0.5)
    pool.poll(0.5)
    assert pool.take(key) is rp.MISSING and not pool._done


def test_a_dead_worker_leaves_the_reference_to_this_process(pool):
    wl = scenarios.move_row_stale_source(5)
    eng = Engine(wl.cfg, BugConfig())
    mkey = R.model_key(eng.model)
    os.kill(pool.proc.pid, signal.SIGSTOP)  # asked while alive, never answered: then it dies
    try:
        assert R.reference_submit(eng, wl, mkey) > 0
    finally:
        pool.proc.kill()
    pool.proc.wait()
    prompt, max_tokens = _requests(wl)[0]
    t = time.monotonic()
    got = R.reference_output(eng, prompt, max_tokens, mkey)
    assert time.monotonic() - t < 10
    assert got == eng.model.greedy_ref(prompt, R._reference_length(eng, prompt, max_tokens))
    assert pool.broken is not None and not pool.usable()


def test_an_engine_with_a_drafter_is_not_sent(pool):
    wl = scenarios.spec_slots(0)
    eng = Engine(wl.cfg, BugConfig())
    assert eng.drafter is not None
    assert R.reference_submit(eng, wl, R.model_key(eng.model)) == 0


def test_disabled_by_the_environment(monkeypatch):
    monkeypatch.setenv("MAMBALAB_REFERENCE_POOL", "0")
    p = rp.ReferencePool()
    assert not p.start() and p.proc is None and not p.usable()


def test_a_late_worker_is_not_waited_for(pool, monkeypatch):
    """A worker starved of CPU (here: stopped) costs one grace, then nothing: the caller computes, and the
    late answers are dropped when they come."""
    monkeypatch.setattr(rp, "GRACE_S", 0.05)
    wl = scenarios.move_row_stale_source(6)
    eng = Engine(wl.cfg, BugConfig())
    mkey = R.model_key(eng.model)
    os.kill(pool.proc.pid, signal.SIGSTOP)
    try:
        assert R.reference_submit(eng, wl, mkey) == len(_requests(wl))
        waits = []
        for prompt, max_tokens in _requests(wl):
            t = time.monotonic()
            got = R.reference_output(eng, prompt, max_tokens, mkey)
            waits.append(time.monotonic() - t)
            assert got == eng.model.greedy_ref(prompt, R._reference_length(eng, prompt, max_tokens))
    finally:
        os.kill(pool.proc.pid, signal.SIGCONT)
    assert sum(waits) < 2.0 and pool.served == 0
    # the late answers are dropped on arrival: a job asked after them is answered after them
    wl7 = scenarios.move_row_stale_source(7)
    eng7 = Engine(wl7.cfg, BugConfig())
    key7 = R.model_key(eng7.model)
    assert R.reference_submit(eng7, wl7, key7) > 0 and pool.wait(60)
    assert pool._done and {k[0] for k in pool._done} == {key7}
    assert pool.broken is None and pool.usable()  # the worker stays, for the next knob change


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="Linux's scheduling classes")
def test_the_worker_starts_in_the_idle_class_and_serves_at_normal_priority(monkeypatch):
    """Its start-up (torch's import, ~2 s CPU) runs only on a core nothing else wants, so it never slows the
    engine beside it; once ready its short jobs run at the normal priority (else a busy core starves them)."""
    monkeypatch.setenv("MAMBALAB_REFERENCE_POOL", "1")
    monkeypatch.setattr(rp, "START_IDLE", True)
    p = rp.ReferencePool()
    try:
        assert p.start()
        assert os.sched_getscheduler(p.proc.pid) == os.SCHED_IDLE
        deadline = time.monotonic() + 90
        while not p.ready and time.monotonic() < deadline:
            p.poll(0.2)
        if not p.ready and p.broken is None and os.sched_getscheduler(p.proc.pid) == os.SCHED_IDLE:
            pytest.skip("every core busy for 90 s: an idle-class start-up is not scheduled (as meant)")
        assert p.ready and p.usable(), (p.broken, p.fingerprint)
        import resource

        if os.geteuid() != 0 and resource.getrlimit(resource.RLIMIT_NICE)[0] < 20:
            pytest.skip("this user may not leave the idle class (RLIMIT_NICE): it serves from there")
        assert os.sched_getscheduler(p.proc.pid) == os.SCHED_OTHER
    finally:
        p.close()
