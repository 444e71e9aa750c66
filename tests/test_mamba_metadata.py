import numpy as np
import pytest
import torch

from mambalab.lab.bugs import BugConfig
from mambalab.constants import NULL_BLOCK_ID, PAD_SLOT_ID
from mambalab.worker.cudagraph_dispatcher import default_capture_sizes, dispatch
from mambalab.worker.input_batch import CachedRequestState, InputBatch
from mambalab.core.kv_cache_interface import MambaSpec
from mambalab.attention.mamba_metadata import MambaAttentionMetadata, MambaAttentionMetadataBuilder
from mambalab.attention.metadata import build_attention_metadata
from mambalab.worker.runner_inputs import RunnerBuffers


def builder(mode="all", ns=2, bugs=None, max_num_seqs=4, bs=16, L=256):
    spec = MambaSpec(bs if mode == "all" else L, mode, ns)
    return MambaAttentionMetadataBuilder(spec, L, max_num_seqs, 512, ns, True, bugs=bugs)


# -- upstream's tests/v1/attention/test_mamba_update_block_table.py ---------------

def test_all_mode_state_indices_width_includes_spec_blocks():
    assert tuple(builder().state_indices_tensor_d.shape) == (4, 16 + 2)


def test_width_bug_has_no_spec_columns():
    b = builder(bugs=BugConfig.with_bugs("spec-slots/width"))
    assert tuple(b.state_indices_tensor_d.shape) == (4, 16)


def decode_md(b, nd=2, ns=1):
    w = b.state_indices_tensor_d.shape[1]
    d = torch.arange(1, 1 + nd * (w + 2), dtype=torch.int32)[: nd * (w + 2)].view(nd, w + 2)[:, :w]
    return MambaAttentionMetadata(
        num_prefills=0, num_prefill_tokens=0, num_decodes=nd, num_decode_tokens=nd * (1 + ns),
        num_reqs=nd, has_initial_states_p=None, query_start_loc_p=None, num_computed_tokens_p=None,
        state_indices_tensor_p=None, state_indices_tensor_d=d.clone(), query_start_loc_d=None,
        num_accepted_tokens=torch.tensor([1, 2], dtype=torch.int32),
        block_idx_last_scheduled_token=torch.tensor([3, 5], dtype=torch.int32),
        block_idx_last_computed_token=torch.tensor([2, 4], dtype=torch.int32),
        block_idx_last_scheduled_token_prev_step=torch.tensor([2, 4], dtype=torch.int32),
    )


def test_capture_padding_by_num_reqs_with_zero_tail():
    b = builder(ns=1)
    b.block_idx_last_scheduled_token.fill_(7)  # stale values from an earlier step
    md = decode_md(b)
    b._update_metadata_for_cudagraph_capture(md, padded_bs=3)
    assert md.block_idx_last_scheduled_token.shape == (3,)
    assert md.block_idx_last_scheduled_token.tolist() == [3, 5, 0]
    assert md.block_idx_last_computed_token.tolist() == [2, 4, 0]
    assert md.num_accepted_tokens.tolist() == [1, 2, 1]
    assert (md.state_indices_tensor_d[2] == NULL_BLOCK_ID).all()
    assert md.cudagraph_buffers_refreshed


def test_padding_bug_slices_by_decode_tokens_and_keeps_stale_tail():
    b = builder(ns=1, bugs=BugConfig.with_bugs("spec-slots/padding"))
    b.block_idx_last_scheduled_token.fill_(7)
    md = decode_md(b)
    b._update_metadata_for_cudagraph_capture(md, padded_bs=3)
    assert md.block_idx_last_scheduled_token.tolist() == [3, 5, 7, 7]  # num_decode_tokens = 4


def test_prev_step_buffer_only_with_spec():
    b = builder(ns=1)
    assert b.block_idx_last_scheduled_token_prev_step.shape == (4,)
    assert b.block_idx_last_scheduled_token_prev_step.dtype == torch.int32
    assert (b.block_idx_last_scheduled_token_prev_step == 0).all()
    assert builder(ns=0).block_idx_last_scheduled_token_prev_step is None


def test_width_bug_crashes_at_capture():
    b = builder(ns=2, bugs=BugConfig.with_bugs("spec-slots/width"))
    md = decode_md(builder(ns=2), ns=2)  # indices as wide as the real block table (16 + 2)
    with pytest.raises(RuntimeError, match="41233"):
        b._update_metadata_for_cudagraph_capture(md, padded_bs=2)


# -- a real step through input batch, runner buffers and the builders -------------

class Step:
    """A minimal decode step: prepare inputs, pad for a FULL graph, build metadata."""

    def __init__(self, bugs, mode="none", ns=0, max_num_seqs=8):
        self.bugs = bugs
        self.ns = ns
        bs = 4 if mode == "all" else 64
        self.spec = MambaSpec(bs, mode, ns)
        self.ib = InputBatch(max_num_seqs, 64, 64, [self.spec], bugs=bugs)
        self.buf = RunnerBuffers(max_num_seqs, 64)
        self.sizes = default_capture_sizes(max_num_seqs, 1 + ns)
        self.mb = MambaAttentionMetadataBuilder(self.spec, 64, max_num_seqs, max(self.sizes), ns,
                                                True, bugs=bugs)
        self.max_num_seqs = max_num_seqs

    def run(self, sched):
        sched = np.asarray(sched, dtype=np.int32)
        p = self.buf.prepare_inputs(self.ib, sched)
        uniform = bool((sched == 1 + self.ns).all())
        desc = dispatch(p.num_tokens, p.num_reqs, uniform_decode=uniform, capture_sizes=self.sizes,
                        max_num_seqs=self.max_num_seqs, num_spec_tokens=self.ns)
        (cm,) = build_attention_metadata(self.ib, self.buf, p.num_reqs, desc.num_reqs_padded,
                                         desc.num_tokens_padded, p.max_query_len, self.bugs)
        return desc, self.mb.build(cm, self.buf.num_accepted_tokens.gpu)


def add(step, i, prompt, computed, blocks):
    step.ib.add_request(CachedRequestState(f"r{i}", [1] * prompt, (blocks,), computed))


@pytest.mark.parametrize("bugs, pad", [(BugConfig(), NULL_BLOCK_ID), (BugConfig.with_bugs("pad-minus-one"), PAD_SLOT_ID)])
def test_none_mode_decode_pads_tail(bugs, pad):
    s = Step(bugs)
    for i in range(3):
        add(s, i, 4, 4, [i + 5])
    desc, md = s.run([1, 1, 1])
    assert desc.num_reqs_padded == 4
    assert md.num_decodes == 4 and md.num_prefills == 0 and md.cudagraph_buffers_refreshed
    assert md.state_indices_tensor_d.tolist() == [5, 6, 7, pad]
    assert md.state_indices_tensor_d.data_ptr() == s.mb.state_indices_tensor_d.data_ptr()


def stale_is_prefilling_steps(bugs):
    """Step 1: r0, r1, r2 decode while r3 prefills. r3 is aborted mid-prefill.
    Step 2: r0, r1 (r2 finished too) decode in a FULL graph padded to 4 rows; row 3 still
    says computed < prompt."""
    s = Step(bugs)
    for i in range(3):
        add(s, i, 4, 4, [i + 5])
    add(s, 3, 10, 2, [9])
    s.run([1, 1, 1, 8])
    s.ib.remove_request("r3")
    s.ib.remove_request("r2")
    s.ib.condense()
    s.ib.add_request(CachedRequestState("r4", [1] * 4, ([12],), 4))
    first = s.mb.state_indices_tensor_d.clone()
    # step 1 had a prefill, so the persistent buffer still holds an even older graph's slots
    return s, first, s.run([1, 1, 1])


def test_stale_is_prefilling_skips_the_refresh():
    s, before, (desc, md) = stale_is_prefilling_steps(BugConfig.with_bugs("stale-is-prefilling"))
    assert desc.num_reqs_padded == 4 and desc.cudagraph_mode.name == "FULL"
    assert md.num_prefills > 0
    assert not md.cudagraph_buffers_refreshed
    # the FULL graph replays over the persistent buffer: it does not hold this step's slots
    assert torch.equal(s.mb.state_indices_tensor_d, before)
    assert s.mb.state_indices_tensor_d[:3].tolist() != [5, 6, 12]


def test_fix_refreshes_the_buffer():
    s, _, (desc, md) = stale_is_prefilling_steps(BugConfig())
    assert md.num_prefills == 0 and md.cudagraph_buffers_refreshed
    assert s.mb.state_indices_tensor_d[:4].tolist() == [5, 6, 12, NULL_BLOCK_ID]


def all_mode_spec_step(bugs):
    """A request in "all" mode with 1 speculative token, after a step that wrote 2 states."""
    s = Step(bugs, mode="all", ns=1)
    # block size 4, 64 tokens → 16 + 1 columns; give the request blocks 10..26
    s.ib.add_request(CachedRequestState("r0", [1] * 8, (list(range(10, 27)),), 9, [3, 4]))
    s.ib.num_accepted_tokens_cpu[0] = 2  # last step: computed 7, scheduled 2, both accepted
    prev = torch.full((8,), -1, dtype=torch.int32)
    prev[0] = 2  # last step's anchor: (seq_len_prev - 1) // 4 = (9 - 1) // 4
    p = s.buf.prepare_inputs(s.ib, np.array([2], dtype=np.int32))
    desc = dispatch(p.num_tokens, 1, uniform_decode=True, capture_sizes=s.sizes, max_num_seqs=8,
                    num_spec_tokens=1)
    (cm,) = build_attention_metadata(s.ib, s.buf, 1, desc.num_reqs_padded, desc.num_tokens_padded,
                                     p.max_query_len, bugs)
    md = s.mb.build(cm, s.buf.num_accepted_tokens.gpu, prev)
    return s, md


def test_all_mode_spec_gathers_from_previous_anchor():
    s, md = all_mode_spec_step(BugConfig())
    src, dst, na = s.mb.decode_state_slots(md)
    # the state after the 2nd accepted token sits in block 2 + 1: column num_accepted - 1 of src
    assert src[0].tolist() == [12, 13] and na[0] == 2
    assert dst[0].tolist() == [12, 13]  # seq_len 11 → last scheduled block 2
    assert (src[1:] == NULL_BLOCK_ID).all()


def test_all_mode_gather_bug_reads_one_slot_at_the_wrong_anchor():
    s, md = all_mode_spec_step(BugConfig.with_bugs("spec-slots/gather"))
    src, dst, na = s.mb.decode_state_slots(md)
    assert src.shape[1] == 1 and na is None
    # cdiv(9, 4) - 1 = 2: block 12 holds the state after the first draft token, not the second
    assert src[0].tolist() == [12]


# -- the dummy run of an idle DP rank (#37728) ---------------------------------------

@pytest.mark.parametrize("bugs, expect", [(BugConfig(), [0, 0, 0, 0]), (BugConfig.with_bugs("stale-rows"), [5, 6, 0, 0])])
def test_idle_rank_dummy_run(bugs, expect):
    s = Step(bugs)
    add(s, 0, 4, 4, [5])
    add(s, 1, 4, 4, [6])
    s.run([1, 1])
    s.ib.remove_request("r0")
    s.ib.remove_request("r1")
    s.ib.condense()
    # the other rank has 4 tokens: this idle rank runs a dummy batch of 4 requests
    p = s.buf.prepare_dummy_run(s.ib, 4, 1, s.max_num_seqs, bugs)
    (cm,) = build_attention_metadata(s.ib, s.buf, p.num_reqs, p.num_reqs, 4, p.max_query_len, bugs)
    md = s.mb.build(cm)
    assert md.num_decodes == 4 and md.state_indices_tensor_d.tolist() == expect


@pytest.mark.parametrize("bugs, split", [(BugConfig(), (3, 0)), (BugConfig.with_bugs("single-token-extend"), (2, 1))],
                         ids=["fixed", "single-token-extend"])
def test_one_token_extend_with_prior_state_runs_as_decode(bugs, split):
    """#42430 (v0.22; v0.33's form has_prior_state = seq_lens > query_lens): the last, one-token
    chunk of a prompt whose earlier chunks ran is a decode; a one-token *first* chunk is not."""
    from mambalab.attention.mamba_metadata import MambaAttentionMetadataBuilder
    from mambalab.attention.metadata import CommonAttentionMetadata
    from mambalab.core.kv_cache_interface import MambaSpec

    b = MambaAttentionMetadataBuilder(MambaSpec(64, "none", 0), 64, 4, 4, 0, full_cudagraph=True, device="cpu",
                                      bugs=bugs)
    qsl = torch.tensor([0, 1, 2, 3, 4], dtype=torch.int32)
    seq = torch.tensor([8, 9, 5, 1], dtype=torch.int32)
    cm = CommonAttentionMetadata(qsl, qsl, seq, 4, 4, 1, 9, torch.tensor([[1], [2], [3], [4]], dtype=torch.int32),
                                 torch.zeros(4, dtype=torch.int64),
                                 is_prefilling=torch.tensor([False, False, True, True]), seq_lens_cpu_upper_bound=seq)
    md = b.build(cm)
    # row 3 (seq_len 1: a first chunk, no prior state) stays a prefill either way
    assert (md.num_decodes, md.num_prefills) == (split[0], 4 - split[0])
    assert cm.is_prefilling.tolist() == [False, False, True, True]  # reclassified on a copy
