"""Scheduler: continuous batching, chunked prefill, preemption, spec-decode accounting, prefix hits."""

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mambalab.constants import NULL_BLOCK_ID
from mambalab.core.kv_cache_manager import KVCacheManager, cdiv
from mambalab.core.kv_cache_interface import MambaSpec
from mambalab.core.request import Request, RequestStatus
from mambalab.core.sched.scheduler import Scheduler, SchedulerError

B = 4


def make(mode="all", nsb=0, num_blocks=64, max_model_len=32, seqs=4, budget=16, threshold=0, **kw):
    m = KVCacheManager(MambaSpec(B, mode, nsb), num_blocks, max_model_len, nsb, **kw)
    return Scheduler(m, seqs, budget, max_model_len, nsb, threshold)


def token_for(req: Request) -> int:
    return 1000 + req.num_tokens  # deterministic "sampling"


def run_step(s: Scheduler, accept=None, drafts=True):
    """Schedule, 'run' (accept `accept` drafts, all by default), update. Returns (output, finished)."""
    out = s.schedule()
    sampled, spec = {}, {}
    for rid in out.num_scheduled_tokens:
        r = s.requests[rid]
        if r.is_prefill_chunk:
            continue
        d = out.scheduled_spec_decode_tokens.get(rid, [])
        a = len(d) if accept is None else min(accept, len(d))
        sampled[rid] = d[:a] + [token_for(r) + a]
        if drafts and s.num_speculative_tokens:
            spec[rid] = [7] * s.num_speculative_tokens
    return out, s.update_from_output(out, sampled, spec)


def new_ids(out):
    return [n.req_id for n in out.scheduled_new_reqs]


# -- scheduling order and limits ------------------------------------------------


def test_running_first_then_waiting_in_fifo_order():
    s = make(budget=100)
    for i in range(3):
        s.add_request(Request(f"r{i}", [i] * 5, 10))
    out, _ = run_step(s)
    assert new_ids(out) == ["r0", "r1", "r2"]
    assert [n.num_computed_tokens for n in out.scheduled_new_reqs] == [0, 0, 0]
    s.add_request(Request("r3", [3] * 5, 10))
    out, _ = run_step(s)
    assert out.scheduled_req_ids == ["r0", "r1", "r2", "r3"]
    assert out.scheduled_cached_reqs.req_ids == ["r0", "r1", "r2"]
    assert out.scheduled_cached_reqs.num_computed_tokens == [5, 5, 5]
    assert out.num_scheduled_tokens == {"r0": 1, "r1": 1, "r2": 1, "r3": 5}
    assert out.total_num_scheduled_tokens == 8 and out.step == 2


def test_chunked_prefill_splits_and_samples_only_at_the_end():
    s = make(budget=8)
    s.add_request(Request("a", list(range(20)), 3))
    chunks = []
    for _ in range(3):
        out = s.schedule()
        chunks.append(out.num_scheduled_tokens["a"])
        r = s.requests["a"]
        done = not r.is_prefill_chunk
        if not done:
            with pytest.raises(ValueError, match="samples nothing"):
                s.update_from_output(out, {"a": [5]})
        s.update_from_output(out, {"a": [5]} if done else {})
    assert chunks == [8, 8, 4]
    r = s.requests["a"]
    assert r.output_token_ids == [5] and r.num_computed_tokens == 20


def test_long_prefill_threshold_and_budget_shared_with_decodes():
    s = make(budget=10, threshold=6)
    s.add_request(Request("d", [1, 2, 3], 10))
    run_step(s)  # d prefilled, decoding from now on
    s.add_request(Request("p", list(range(20)), 3))
    out, _ = run_step(s)
    assert out.num_scheduled_tokens == {"d": 1, "p": 6}  # threshold caps the chunk
    s2 = make(budget=5)
    s2.add_request(Request("d", [1, 2, 3], 10))
    run_step(s2)
    s2.add_request(Request("p", list(range(20)), 3))
    out, _ = run_step(s2)
    assert out.num_scheduled_tokens == {"d": 1, "p": 4}  # budget left after the decode


def test_max_num_seqs_limits_running_requests():
    s = make(seqs=2, budget=100)
    for i in range(3):
        s.add_request(Request(f"r{i}", [i] * 3, 2))
    out, _ = run_step(s)
    assert new_ids(out) == ["r0", "r1"] and [r.request_id for r in s.waiting] == ["r2"]
    out, finished = run_step(s)  # r0 and r1 finish (max_tokens=2)
    assert {r.request_id for r in finished} == {"r0", "r1"} and "r2" not in out.num_scheduled_tokens
    out, _ = run_step(s)
    assert new_ids(out) == ["r2"] and out.finished_req_ids == {"r0", "r1"}


def test_finish_at_max_tokens_frees_and_reports():
    s = make()
    s.add_request(Request("a", [1, 2, 3], 2))
    run_step(s)
    blocks = list(s.requests["a"].block_ids)
    out, finished = run_step(s)
    (a,) = finished
    assert a.status == RequestStatus.FINISHED_LENGTH and a.output_token_ids == [1003, 1004]
    assert a.block_ids == [] and not any(s.kv_cache_manager.block_pool.is_allocated(b) for b in blocks)
    assert not s.has_unfinished_requests()
    out = s.schedule()
    assert out.finished_req_ids == {"a"} and out.num_scheduled_tokens == {}
    assert s.schedule().finished_req_ids == set()  # reported once


def test_finish_at_max_model_len():
    s = make(max_model_len=8)
    s.add_request(Request("a", list(range(5)), 100))
    for _ in range(3):
        _, finished = run_step(s)
    (a,) = finished
    assert a.num_tokens == 8 and a.status == RequestStatus.FINISHED_LENGTH


# -- abort ---------------------------------------------------------------------


def test_abort_mid_prefill_frees_blocks_and_reports():
    s = make(budget=4)
    s.add_request(Request("a", list(range(12)), 3))
    run_step(s)
    a = s.requests["a"]
    assert a.is_prefill_chunk and a.num_computed_tokens == 4 and a.block_ids
    blocks = list(a.block_ids)
    assert s.abort_request("a") is True
    assert a.status == RequestStatus.FINISHED_ABORTED and a.block_ids == []
    assert not any(s.kv_cache_manager.block_pool.is_allocated(b) for b in blocks)
    out = s.schedule()
    assert out.finished_req_ids == {"a"} and out.num_scheduled_tokens == {}
    assert s.abort_request("a") is False  # already finished: no-op
    with pytest.raises(KeyError, match="unknown"):
        s.abort_request("nope")


def test_abort_between_schedule_and_update_drops_the_work():
    s = make()
    s.add_request(Request("a", [1, 2, 3], 5))
    s.add_request(Request("b", [4, 5, 6], 5))
    out = s.schedule()
    s.abort_request("a")
    s.update_from_output(out, {"a": [9], "b": [9]})
    assert s.requests["b"].output_token_ids == [9] and "a" not in s.requests


def test_abort_waiting_request():
    s = make(seqs=1)
    s.add_request(Request("a", [1], 5))
    s.add_request(Request("b", [2], 5))
    run_step(s)
    assert s.abort_request("b") and [r.request_id for r in s.waiting] == []
    assert s.schedule().finished_req_ids == {"b"}


# -- preemption ----------------------------------------------------------------


def test_forced_preemption_and_resume_recompute_prompt_and_outputs():
    s = make("none")
    s.add_request(Request("a", [1, 2, 3], 10))
    run_step(s)
    run_step(s)
    a = s.requests["a"]
    assert a.output_token_ids == [1003, 1004] and a.num_computed_tokens == 4
    s.preempt_request("a")
    assert a.status == RequestStatus.PREEMPTED and a.num_computed_tokens == 0 and a.block_ids == []
    assert a.output_token_ids == [1003, 1004] and a.num_preemptions == 1
    out, _ = run_step(s)
    assert out.preempted_req_ids == {"a"} and out.finished_req_ids == {"a"}
    (nd,) = out.scheduled_new_reqs  # resumed as a new request
    assert nd.req_id == "a" and nd.output_token_ids == [1003, 1004] and nd.num_computed_tokens == 0
    assert out.num_scheduled_tokens == {"a": 5}  # prompt + outputs
    assert a.output_token_ids == [1003, 1004, 1005] and a.num_computed_tokens == 5
    with pytest.raises(ValueError, match="not running"):
        s.preempt_request("zzz")


def test_forced_preemption_between_schedule_and_update_drops_the_work():
    s = make("all")
    s.add_request(Request("a", list(range(6)), 10))
    run_step(s)
    out = s.schedule()
    s.preempt_request("a")
    s.update_from_output(out, {"a": [42]})  # the step ran, but its result is dropped
    a = s.requests["a"]
    assert a.output_token_ids == [1006] and a.num_computed_tokens == 0
    out, _ = run_step(s)
    assert out.preempted_req_ids == {"a"} and new_ids(out) == ["a"]
    assert out.scheduled_new_reqs[0].num_computed_tokens == 4  # its own cached block 0


def test_pressure_preempts_the_last_running_request_and_resume_hits_its_own_blocks():
    # 7 allocatable blocks; three requests that grow in "all" mode.
    s = make("all", num_blocks=8, max_model_len=24, budget=64)
    s.add_request(Request("a", list(range(8)), 20))
    s.add_request(Request("b", list(range(100, 108)), 20))
    s.add_request(Request("c", [5], 20))
    out, _ = run_step(s)
    assert new_ids(out) == ["a", "b", "c"]  # a: [1, 2], b: [3, 4], c: [5]
    for _ in range(3):
        out, _ = run_step(s)  # a and b take blocks 6, 7 at token 9; pool empty
    assert not out.preempted_req_ids and s.kv_cache_manager.block_pool.get_num_free_blocks() == 0
    out, _ = run_step(s)  # c needs a 2nd block at token 5: it is the last, so it goes
    c = s.requests["c"]
    assert out.preempted_req_ids == {"c"} and out.finished_req_ids == {"c"}
    assert out.num_scheduled_tokens == {"a": 1, "b": 1}
    assert c.status == RequestStatus.PREEMPTED and c.num_computed_tokens == 0 and c.block_ids == []
    assert c.output_token_ids == [1001, 1002, 1003, 1004]  # kept
    out, _ = run_step(s)  # a takes c's block; b then finds none and preempts itself
    assert out.preempted_req_ids == {"b"} and out.num_scheduled_tokens == {"a": 1}
    assert [r.request_id for r in s.waiting] == ["b", "c"]  # preempted go back to the head
    b = s.requests["b"]
    kept = list(b.output_token_ids)
    out, _ = run_step(s)  # b resumes as a new request; its own full blocks are still cached
    (nd,) = out.scheduled_new_reqs
    assert nd.req_id == "b" and nd.num_computed_tokens == 12 and out.num_scheduled_tokens["b"] == 1
    assert nd.block_ids[0][:2] == [NULL_BLOCK_ID, NULL_BLOCK_ID] and nd.output_token_ids == kept
    for _ in range(60):
        if not s.has_unfinished_requests():
            break
        out, _ = run_step(s)
        assert out.preempted_req_ids <= out.finished_req_ids
    assert not s.has_unfinished_requests()
    assert b.num_tokens == 24 and len(c.output_token_ids) == 20  # max_model_len / max_tokens


def test_a_step_that_preempts_admits_no_waiting_request():
    s = make("all", num_blocks=6, max_model_len=16, budget=64)  # 5 allocatable
    s.add_request(Request("a", list(range(7)), 20))
    s.add_request(Request("b", list(range(50, 57)), 20))
    run_step(s)  # a: [1, 2], b: [3, 4]
    s.add_request(Request("w", [1], 5))
    out, _ = run_step(s)
    assert new_ids(out) == ["w"]  # the last free block
    out, _ = run_step(s)  # a needs a 3rd block: w goes, then b (no block left for it)
    assert out.preempted_req_ids == {"w", "b"} and out.num_scheduled_tokens == {"a": 1}
    # b's blocks are free again, yet nothing is admitted in a step that preempted.
    assert s.kv_cache_manager.block_pool.get_num_free_blocks() == 2 and not out.scheduled_new_reqs
    out, _ = run_step(s)
    assert new_ids(out) == ["b"]  # next step, FIFO from the head


# -- speculative decoding ------------------------------------------------------


@pytest.mark.parametrize("accepted", [0, 1, 2, 3])
@pytest.mark.parametrize("mode", ["none", "all"])
def test_spec_decode_accounting_for_every_acceptance_count(accepted, mode):
    k = 3
    s = make(mode, nsb=k)
    s.add_request(Request("a", list(range(6)), 50))
    run_step(s)  # prefill + first token + drafts
    a = s.requests["a"]
    assert a.num_computed_tokens == 6 and a.num_tokens == 7 and a.spec_token_ids == [7, 7, 7]
    out = s.schedule()
    assert out.num_scheduled_tokens == {"a": 1 + k}
    assert out.scheduled_spec_decode_tokens == {"a": [7, 7, 7]} and a.spec_token_ids == []
    assert a.num_computed_tokens == 6 + 1 + k  # advanced by what was scheduled
    blocks_needed = cdiv(6 + 1 + k, B) + k if mode == "all" else 1 + k
    assert len(a.block_ids) == blocks_needed
    sampled = [7] * accepted + [99]
    s.update_from_output(out, {"a": sampled}, {"a": [8, 8, 8]})
    # ... then corrected back by the k - accepted rejected drafts.
    assert a.num_computed_tokens == 6 + 1 + accepted
    assert a.num_tokens == a.num_computed_tokens + 1
    assert a.output_token_ids == [1006] + sampled and a.spec_token_ids == [8, 8, 8]
    with pytest.raises(ValueError, match="sampled tokens"):
        out = s.schedule()
        s.update_from_output(out, {"a": [7] * (k + 1) + [1]})


def test_spec_decode_bad_outputs():
    s = make("all", nsb=2)
    s.add_request(Request("a", [1, 2, 3], 50))
    out = s.schedule()
    with pytest.raises(ValueError, match="num_speculative_tokens=2"):
        s.update_from_output(out, {"a": [5]}, {"a": [1, 2, 3]})
    with pytest.raises(ValueError, match="expected 1..1"):
        s.update_from_output(out, {"a": []})
    with pytest.raises(ValueError, match="not scheduled"):
        s.update_from_output(out, {"a": [5], "x": [1]})
    s.update_from_output(out, {"a": [5]}, {"a": [1, 2]})
    assert s.requests["a"].spec_token_ids == [1, 2]


def test_drafts_are_trimmed_at_max_model_len():
    s = make("none", nsb=3, max_model_len=10)
    s.add_request(Request("a", list(range(7)), 50))
    run_step(s)  # 8 tokens, 7 computed
    out = s.schedule()
    assert out.num_scheduled_tokens == {"a": 2}  # positions 7, 8 only (max_model_len - 1)
    assert out.scheduled_spec_decode_tokens == {"a": [7]}
    (a,) = s.update_from_output(out, {"a": [7, 5]})
    assert a.num_tokens == 10 and a.status == RequestStatus.FINISHED_LENGTH


def test_drafts_for_a_prefill_chunk_are_ignored():
    s = make("all", nsb=1, budget=4)
    s.add_request(Request("a", list(range(8)), 5))
    out = s.schedule()
    s.update_from_output(out, {}, {"a": [3]})
    assert s.requests["a"].spec_token_ids == []


# -- prefix caching through the scheduler --------------------------------------


def test_prefix_hit_through_the_scheduler():
    s = make("all", nsb=1)
    s.add_request(Request("a", list(range(10)), 1))
    _, (a,) = run_step(s)  # finishes at once; its full blocks stay cached
    a_blocks = s.kv_cache_manager.block_pool.cached_block_ids()
    assert len(a_blocks) == 2
    s.add_request(Request("b", list(range(10)) + [77], 3))
    out, _ = run_step(s)
    (nd,) = out.scheduled_new_reqs
    assert nd.num_computed_tokens == 8 and out.num_scheduled_tokens == {"b": 3}
    assert nd.block_ids[0][:2] == [NULL_BLOCK_ID, a_blocks[1]]
    assert len(nd.block_ids[0]) == cdiv(11, B) + 1
    assert s.requests["b"].num_cached_tokens == 8


def test_prompt_fully_cached_backs_off_one_block():
    s = make("all")
    s.add_request(Request("a", list(range(8)), 1))
    run_step(s)
    s.add_request(Request("b", list(range(8)), 1))
    out, _ = run_step(s)
    assert out.scheduled_new_reqs[0].num_computed_tokens == 4 and out.num_scheduled_tokens == {"b": 4}


# -- bad input -----------------------------------------------------------------


def test_bad_requests():
    s = make(max_model_len=16)
    s.add_request(Request("a", [1], 1))
    with pytest.raises(ValueError, match="duplicate"):
        s.add_request(Request("a", [1], 1))
    with pytest.raises(ValueError, match="max_model_len"):
        s.add_request(Request("long", list(range(16)), 1))
    with pytest.raises(ValueError, match="max_tokens"):
        Request("z", [1], 0)
    with pytest.raises(ValueError, match="empty"):
        Request("z", [], 1)
    with pytest.raises(ValueError, match="token ids"):
        Request("z", [1, -2], 1)
    with pytest.raises(ValueError, match="request_id"):
        Request("", [1], 1)
    with pytest.raises(TypeError):
        s.add_request("a")


def test_bad_configuration_and_driving_order():
    m = KVCacheManager(MambaSpec(B, "all", 1), 64, 32, 1)
    with pytest.raises(ValueError, match="max_model_len"):
        Scheduler(m, 4, 16, 64, 1)
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        Scheduler(m, 4, 16, 32, 0)
    with pytest.raises(ValueError, match="max_num_seqs"):
        Scheduler(m, 0, 16, 32, 1)
    s = Scheduler(m, 4, 16, 32, 1)
    s.add_request(Request("a", [1, 2], 3))
    out = s.schedule()
    with pytest.raises(SchedulerError, match="update_from_output"):
        s.schedule()
    s.update_from_output(out, {"a": [3]})
    with pytest.raises(SchedulerError, match="step"):
        s.update_from_output(out, {"a": [3]})


# -- properties under random add / step / abort / preempt ----------------------

BASES = [[(i * 7 + k) % 5 for i in range(32)] for k in range(3)]

ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 2), st.integers(1, 20), st.integers(1, 8)),
        st.tuples(st.just("step"), st.integers(0, 3)),
        st.tuples(st.just("step"), st.integers(0, 3)),
        st.tuples(st.just("step"), st.integers(0, 3)),
        st.tuples(st.just("abort"), st.integers(0, 20)),
        st.tuples(st.just("preempt"), st.integers(0, 20)),
    ),
    max_size=40,
)
configs = st.tuples(
    st.sampled_from(["none", "all", "all-skip"]),
    st.sampled_from([0, 2]),  # num_speculative_tokens
    st.integers(0, 10),  # extra blocks beyond the minimum
    st.integers(1, 4),  # max_num_seqs
    st.integers(3, 16),  # token budget
    st.sampled_from([0, 5]),  # long_prefill_token_threshold
)

POISON = "poison"


class IdealEngine:
    """Tracks which prefix each state block holds; the engine poisons what it frees."""

    def __init__(self, s: Scheduler):
        self.s = s
        self.m = s.kv_cache_manager
        self.state: dict[int, object] = {}
        self.m.on_free = lambda b, cached: None if cached else self.state.__setitem__(b, POISON)
        self.m.on_evict = lambda b: self.state.__setitem__(b, POISON)
        self.outputs: dict[str, list[int]] = {}

    def step(self, accept: int) -> None:
        s, m = self.s, self.m
        before = {r.request_id: r.num_computed_tokens for r in s.requests.values()}
        out = s.schedule()
        if not out.num_scheduled_tokens:
            return
        sampled, spec, writes = {}, {}, []
        nc0 = {n.req_id: n.num_computed_tokens for n in out.scheduled_new_reqs}
        nc0.update(zip(out.scheduled_cached_reqs.req_ids, out.scheduled_cached_reqs.num_computed_tokens))
        for rid, n in out.num_scheduled_tokens.items():
            r = s.requests[rid]
            c0 = nc0[rid]
            assert c0 == (before[rid] if rid in out.scheduled_cached_reqs.req_ids else c0)
            blocks = r.block_ids
            tokens = r.all_token_ids
            # Read: the initial state must be exactly this request's prefix.
            if c0 > 0:
                src = blocks[cdiv(c0, B) - 1] if m.enable_caching else blocks[0]
                assert src != NULL_BLOCK_ID and self.state.get(src) == tuple(tokens[:c0]), rid
            drafts = out.scheduled_spec_decode_tokens.get(rid, [])
            a = min(accept, len(drafts))
            if not r.is_prefill_chunk:
                sampled[rid] = drafts[:a] + [(len(tokens) * 3) % 5]
                if s.num_speculative_tokens:
                    spec[rid] = [(len(tokens) + i) % 5 for i in range(s.num_speculative_tokens)]
            c1 = c0 + n - (len(drafts) - a if not r.is_prefill_chunk else 0)
            seq = tokens + drafts[:a]
            if m.enable_caching:
                for j in range(c0 // B + 1, c1 // B + 1):  # block boundaries crossed
                    writes.append((blocks[j - 1], tuple(seq[: j * B])))
                writes.append((blocks[cdiv(c1, B) - 1], tuple(seq[:c1])))
            else:
                writes.append((blocks[0], tuple(seq[:c1])))
        for b, prefix in writes:
            assert b != NULL_BLOCK_ID and not m.block_pool.is_cached(b), "write into a cached block"
            self.state[b] = prefix
        s.update_from_output(out, sampled, spec)

    def check(self) -> None:
        s, m, pool = self.s, self.m, self.m.block_pool
        live = list(s.requests.values())
        held = Counter(b for r in live for b in r.block_ids if b != NULL_BLOCK_ID)
        # The pool never leaks: free (cached ones included) + held == allocatable.
        free = pool.free_block_ids()
        assert len(free) + len(held) == pool.num_allocatable_blocks
        assert set(free).isdisjoint(held) and NULL_BLOCK_ID not in free
        assert {b: pool.ref_count(b) for b in held} == dict(held)
        assert set(pool.allocated_block_ids()) == set(held)
        assert NULL_BLOCK_ID not in pool.cached_block_ids()
        # A block held twice is a shared prefix hit: it must be cached (read-only).
        assert all(pool.is_cached(b) for b, c in held.items() if c > 1)
        nsb = m.num_speculative_blocks
        for r in live:
            assert r.block_ids == m.get_block_ids(r)[0]
            out = self.outputs.setdefault(r.request_id, [])
            assert r.output_token_ids[: len(out)] == out  # outputs survive preemption
            self.outputs[r.request_id] = list(r.output_token_ids)
            if r.status != RequestStatus.RUNNING:
                assert r.block_ids == [] and r.num_computed_tokens == 0
            elif m.enable_caching:
                assert len(r.block_ids) >= cdiv(r.num_computed_tokens, B) + nsb
                assert r.block_ids[cdiv(r.num_computed_tokens, B) - 1] != NULL_BLOCK_ID
            else:
                assert len(r.block_ids) == 1 + nsb and NULL_BLOCK_ID not in r.block_ids
            assert r.num_computed_tokens <= r.num_tokens
        assert len(s.running) <= s.max_num_seqs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs, ops)
def test_random_schedules_never_double_own_leak_or_lose_state(config, sequence):
    mode, nsb, extra, seqs, budget, threshold = config
    max_model_len = 24
    need = (cdiv(max_model_len, B) if mode != "none" else 1) + nsb
    m = KVCacheManager(
        MambaSpec(B, "none" if mode == "none" else "all", nsb), need + 1 + extra, max_model_len, nsb,
        free_skipped_blocks=mode == "all-skip",
    )
    s = Scheduler(m, seqs, budget, max_model_len, nsb, threshold)
    eng = IdealEngine(s)
    n = 0
    for op in sequence:
        if op[0] == "add":
            _, base, length, max_tokens = op
            s.add_request(Request(f"q{n}", BASES[base][:length], max_tokens))
            n += 1
        elif op[0] == "step":
            eng.step(op[1])
        elif op[0] == "abort" and s.requests:
            s.abort_request(sorted(s.requests)[op[1] % len(s.requests)])
        elif op[0] == "preempt" and s.running:
            s.preempt_request(s.running[op[1] % len(s.running)].request_id)
        eng.check()
    for i in range(400):  # everything finishes: no deadlock, no livelock
        if not s.has_unfinished_requests():
            break
        eng.step(i % 3)
        eng.check()
    assert not s.has_unfinished_requests()
    assert m.block_pool.get_num_free_blocks() == m.block_pool.num_allocatable_blocks
