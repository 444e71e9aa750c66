import pytest

from mambalab.worker.cudagraph_dispatcher import (
    CUDAGraphMode,
    coordinate_batch_across_dp,
    default_capture_sizes,
    dispatch,
    pad_for_cudagraph,
)


def test_default_capture_sizes_match_vllm():
    sizes = default_capture_sizes(max_num_seqs=256)
    assert len(sizes) == 51
    assert sizes[:4] == [1, 2, 4, 8] and sizes[-1] == 512
    assert sizes == [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))
    assert default_capture_sizes(4) == [1, 2, 4, 8]
    assert default_capture_sizes(4, uniform_decode_query_len=3)[-1] == 24


def test_padding_to_next_size():
    sizes = default_capture_sizes(256)
    assert pad_for_cudagraph(9, sizes) == 16
    assert pad_for_cudagraph(16, sizes) == 16
    assert pad_for_cudagraph(257, sizes) == 272
    assert pad_for_cudagraph(513, sizes) is None


def test_full_uniform_decode_pads_requests():
    d = dispatch(9, 9, uniform_decode=True, capture_sizes=default_capture_sizes(256), max_num_seqs=256)
    assert (d.num_tokens_padded, d.num_reqs_padded, d.cudagraph_mode) == (16, 16, CUDAGraphMode.FULL)
    # spec decode: uniform query length 1 + num_spec
    d = dispatch(6, 3, uniform_decode=True, capture_sizes=[1, 2, 4, 8], max_num_seqs=4, num_spec_tokens=1)
    assert (d.num_tokens_padded, d.num_reqs_padded, d.uniform_decode_query_len) == (8, 4, 2)
    # capped by max_num_seqs
    d = dispatch(3, 3, uniform_decode=True, capture_sizes=[1, 2, 4, 8], max_num_seqs=3)
    assert d.num_reqs_padded == 3 and d.num_tokens_padded == 4


def test_mixed_batch_is_piecewise_and_eager_above_max():
    d = dispatch(7, 2, uniform_decode=False, capture_sizes=[1, 2, 4, 8], max_num_seqs=8)
    assert (d.num_tokens_padded, d.num_reqs_padded, d.cudagraph_mode) == (8, 2, CUDAGraphMode.PIECEWISE)
    d = dispatch(9, 2, uniform_decode=False, capture_sizes=[1, 2, 4, 8], max_num_seqs=8)
    assert d.cudagraph_mode is CUDAGraphMode.NONE and d.num_tokens_padded == 9


def test_dp_ranks_pad_to_the_largest():
    sizes = default_capture_sizes(64)
    assert coordinate_batch_across_dp([3, 0], sizes) == 4
    d = dispatch(1, 1, uniform_decode=True, capture_sizes=sizes, max_num_seqs=64, num_tokens_across_dp=4)
    assert d.num_tokens_padded == 4 and d.num_reqs_padded == 4


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_tokens=-1, num_reqs=0), "num_tokens"),
    (dict(num_tokens=4, num_reqs=9), "max_num_seqs"),
])
def test_dispatch_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dispatch(**kwargs, uniform_decode=True, capture_sizes=[1, 2], max_num_seqs=8)


# -- v0.33: _set_cudagraph_sizes (vllm/config/vllm.py) and its spec-decode adjustment --------
from mambalab.worker.cudagraph_dispatcher import (  # noqa: E402
    adjust_cudagraph_sizes_for_spec_decode,
    cudagraph_capture_sizes,
    set_cudagraph_sizes,
)


def test_set_cudagraph_sizes_default_list():
    """max_num_seqs=256, q=1, non-Blackwell, max_num_batched_tokens >= 512: 51 sizes, 1..512."""
    sizes, top = set_cudagraph_sizes(256, 8192)
    assert top == 512 and len(sizes) == 51 and sizes == default_capture_sizes(256)
    # the ceiling is capped by max_num_batched_tokens, which joins the list when it fits
    sizes, top = set_cudagraph_sizes(256, 100)
    assert top == 100 and sizes[-1] == 100 and 96 in sizes and 104 not in sizes
    # q == 1 (v0.31+): max_num_seqs joins the list when it fits
    assert 5 in set_cudagraph_sizes(5, 64)[0]


def test_set_cudagraph_sizes_adds_uniform_decode_sizes():
    """v0.29+: with q > 1, n * q for n in the request grid, within the ceiling."""
    sizes, top = set_cudagraph_sizes(4, 64, uniform_decode_query_len=3)
    assert top == 24  # min(4 * 3 * 2, 512), then min(64, .)
    assert sizes == [1, 2, 3, 4, 6, 8, 12, 16, 24]


def test_adjust_rounds_up_to_multiples_of_q():
    """Upstream rounds up (it does not multiply): [1, 2, 4, 8, 16] with q = 3, max 24 ->
    3, 3, 6, 9, 18 -> [3, 6, 9, 18]; the ceiling becomes the largest kept."""
    assert adjust_cudagraph_sizes_for_spec_decode([1, 2, 4, 8, 16], 24, 3) == ([3, 6, 9, 18], 18)
    # a rounded size above the ceiling is dropped
    assert adjust_cudagraph_sizes_for_spec_decode([4, 8, 23], 23, 4) == ([4, 8], 8)
    # nothing left but q fits: [q]; q above the ceiling: an error
    assert adjust_cudagraph_sizes_for_spec_decode([5], 6, 6) == ([6], 6)
    with pytest.raises(ValueError):
        adjust_cudagraph_sizes_for_spec_decode([5], 5, 6)
    # q <= 1 or no sizes: unchanged
    assert adjust_cudagraph_sizes_for_spec_decode([1, 3], 4, 1) == ([1, 3], 4)
    assert adjust_cudagraph_sizes_for_spec_decode([], 4, 2) == ([], 4)


def test_capture_sizes_with_spec_decode_are_not_a_product():
    """max_num_seqs 256, one speculative token: every size a multiple of 2 up to 512, including
    24 and 272 (a rounded token size), which q * (request-count grid) would never give."""
    sizes = cudagraph_capture_sizes(256, 8192, num_speculative_tokens=1)
    assert sizes[0] == 2 and sizes[-1] == 512 and all(s % 2 == 0 for s in sizes)
    assert 24 in sizes and 272 in sizes
    assert 24 not in {2 * b for b in default_capture_sizes(256)}
    assert cudagraph_capture_sizes(4, 64, num_speculative_tokens=2) == [3, 6, 9, 12, 18, 24]
