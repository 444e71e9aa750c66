"""The exercises: one :class:`Exercise` per question of the notebooks, each with its cases, the
expected answers computed with the library (never with a solution), in the registry
:data:`EXERCISES`. The checker is :mod:`mambalab.workbook.checker`; the GPU chapter's cases live
with :mod:`mambalab.gpu.gpu_report`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from mambalab.attention.mamba_metadata import MambaAttentionMetadataBuilder
from mambalab.attention.metadata import build_attention_metadata
from mambalab.constants import NULL_BLOCK_ID
from mambalab.core.kv_cache_interface import MambaSpec
from mambalab.lab.bugs import BugConfig
from mambalab.worker.cudagraph_dispatcher import default_capture_sizes, dispatch
from mambalab.worker.input_batch import InputBatch
from mambalab.worker.runner_inputs import RunnerBuffers
from mambalab.workbook.mini_world import MiniWorld


@dataclass
class Exercise:
    id: str
    name: str  # the function the learner writes
    task: str
    cases: Callable[[], list[tuple[tuple, Any]]]  # [(args, expected)], expected from the library

    def describe_args(self, args: tuple) -> str:
        def one(a):
            if isinstance(a, torch.Tensor):
                return f"tensor{tuple(a.shape)}"
            return repr(a)
        return ", ".join(one(a) for a in args)


def _ex_00_1():
    cases = []
    for n, m in [(1, 4), (3, 4), (4, 4), (5, 8), (9, 16), (17, 32), (30, 64)]:
        d = dispatch(n, n, uniform_decode=True, capture_sizes=default_capture_sizes(m), max_num_seqs=m)
        cases.append(((n, m), d.num_reqs_padded))
    return cases


def _ex_00_2():
    from mambalab.worker.block_table import BlockTable

    cases = []
    for row, pos, bs in [([3], 0, 4), ([3], 2, 4), ([3, 7], 5, 4), ([5, 1, 9], 11, 4), ([2, 6], 17, 16)]:
        bt = BlockTable(bs, 1, len(row), 8, device="cpu")
        bt.add_row(row, 0)
        bt.compute_slot_mapping(np.array([0]), np.array([pos]))
        cases.append(((list(row), pos, bs), int(bt.slot_mapping.np[0])))
    return cases


def _ex_00_3():
    from mambalab.model.tiny_hybrid import ModelState, TinyHybridConfig

    cases = []
    for kw in [{}, {"mamba_dstate": 8}, {"conv_width": 3, "gdn_head_k_dim": 8}, {"num_speculative_tokens": 2}]:
        cfg = TinyHybridConfig(**kw)
        st = ModelState.allocate(cfg, 2, device="cpu")
        cases.append(((cfg,), sum(p[0].numel() for p in st.pools.values())))
    return cases


def _ex_01_1():
    cases = []
    base = torch.zeros(8, 2, 4, 4)
    pools = [base, torch.zeros(5, 3, 16), base[:, 1], torch.zeros(10, 4, 6).transpose(1, 2)]
    for t in pools:
        for idx in (-1, 0, 3):
            cases.append(((t, idx), idx * t.stride(0)))
    return cases


def _guard_cases(mode):
    from mambalab.lab.bugs import GuardMode

    rows = [[3, 5, 2, 0], [4, 0, 0, 0, 0], [-1, 2, -1], [1, 0, 7, -1]]
    out = []
    for r in rows:
        g = GuardMode.NULL if mode == "skipped" else GuardMode.NEGATIVE
        if mode == "skipped":
            out.append(((list(r),), [i for i, v in enumerate(r) if not g.is_live(v)]))
        else:
            out.append(((list(r),), [i for i, v in enumerate(r) if g.is_live(v) and v == NULL_BLOCK_ID]))
    return out


def _ex_02_1():
    from mambalab.worker.block_table import BlockTable

    cases = []
    for cpu, dev, n in [([[3], [5], [0], [0]], [[3], [5], [6], [2]], 2),
                        ([[0], [0], [0], [0]], [[4], [7], [0], [0]], 0),
                        ([[1], [0], [9], [0]], [[2], [8], [8], [3]], 3)]:
        bt = BlockTable(64, len(cpu), 1, 8, device="cpu")
        bt.block_table.gpu.copy_(torch.tensor(dev, dtype=torch.int32))
        bt.block_table.np[:] = np.array(cpu, dtype=np.int32)
        bt.commit_block_table(n)
        cases.append((([list(r) for r in cpu], [list(r) for r in dev], n), bt.block_table.gpu.tolist()))
    return cases


def _ex_02_2():
    cases = []
    for dev, n in [([[3], [5], [0], [0]], 4), ([[3], [5], [0], [0]], 1), ([[0], [0], [0], [0]], 4),
                   ([[6], [0], [2], [6]], 4)]:
        cases.append((([list(r) for r in dev], n), sorted({r[0] for r in dev[:n]} - {NULL_BLOCK_ID})))
    return cases


def _ex_02_3():
    """After each operation sequence on a stale-rows-fixed batch: which CPU rows still hold a block."""
    cases = []
    for seq in [("add r0", "add r1", "finish r0"), ("add r0", "add r1", "add r2", "finish r1", "finish r2"),
                ("add r0", "finish r0", "add r1")]:
        w = MiniWorld(BugConfig(), num_blocks=8)
        for op in seq:
            verb, rid = op.split()
            (w.add if verb == "add" else w.finish)(rid)
        cases.append(((tuple(seq), False), [int(b) for b in w.block_table.block_table.np[:, 0]]))
        w = MiniWorld(BugConfig.with_bugs("stale-rows"), num_blocks=8)
        for op in seq:
            verb, rid = op.split()
            (w.add if verb == "add" else w.finish)(rid)
        cases.append(((tuple(seq), True), [int(b) for b in w.block_table.block_table.np[:, 0]]))
    return cases


def _ex_03_1():
    cases = []
    for L, B, ns in [(64, 4, 1), (256, 16, 2), (48, 4, 0), (100, 16, 3)]:
        b = MambaAttentionMetadataBuilder(MambaSpec(B, "all", ns), L, 4, 8, ns, device="cpu")
        cases.append(((L, B, ns), int(b.state_indices_tensor_d.shape[1])))
    return cases


def _ex_03_2():
    from mambalab.attention.mamba_metadata import _cdiv_t

    cases = []
    for nc, seq, B in [(8, 10, 4), (9, 11, 4), (0, 5, 4), (15, 17, 16), (16, 18, 16), (3, 4, 4)]:
        t_nc, t_seq = torch.tensor([nc]), torch.tensor([seq])
        last_computed = int(torch.clamp(_cdiv_t(t_nc, B) - 1, min=0))
        first_sched = int(_cdiv_t(t_nc + 1, B) - 1)
        last_sched = int(torch.clamp(_cdiv_t(t_seq, B) - 1, min=0))
        cases.append(((nc, seq, B), (last_computed, first_sched, last_sched)))
    return cases


def _ex_03_3():
    cases = []
    for row, anchor, acc, ns in [([0, 4, 9, 11, 12], 1, 1, 1), ([0, 4, 9, 11, 12], 1, 2, 1),
                                 ([7, 3, 8, 2, 5, 6], 2, 3, 2), ([7, 3, 8, 2, 5, 6], 0, 1, 2)]:
        d = torch.tensor([row], dtype=torch.int64)
        src = d.gather(1, torch.tensor([[anchor]]) + torch.arange(1 + ns))  # the fixed gather
        cases.append(((list(row), anchor, acc), int(src[0, acc - 1])))
    return cases


def _ex_04_1():
    cases = []
    for nc, npr, n, padded in [([5, 9, 3, 2], [5, 9, 3, 40], 3, 4),
                               ([50, 100, 200, 10, 20], [50, 200, 200, 100, 200], 3, 5),  # upstream's vector
                               ([1, 1], [4, 1], 2, 2), ([7, 0, 0, 0], [7, 3, 9, 0], 1, 4)]:
        ib = InputBatch(len(nc), 256, 64, [MambaSpec(256, "none", 0)], device="cpu")
        ib.num_computed_tokens_cpu[:] = nc
        ib.num_prompt_tokens[:] = npr
        buf = RunnerBuffers(len(nc), 64, device="cpu")
        (cm,) = build_attention_metadata(ib, buf, n, padded, padded, 1, BugConfig())
        cases.append(((list(nc), list(npr), n, padded), [bool(x) for x in cm.is_prefilling.tolist()]))
    return cases


def _ex_04_2():
    from mambalab.attention.metadata import CommonAttentionMetadata, split_decodes_and_prefills

    cases = []
    for qlens, pref, thr in [([1, 1], [False, True], 1), ([1, 1, 1, 0], [False, False, False, True], 1),
                             ([1, 1, 1, 0], [False, False, False, False], 1), ([2, 2, 5], [False, False, False], 2),
                             ([1, 3, 0], [False, False, True], 1)]:
        qsl = torch.tensor([0] + list(np.cumsum(qlens)), dtype=torch.int32)
        cm = CommonAttentionMetadata(
            query_start_loc=qsl, query_start_loc_cpu=qsl, seq_lens=qsl[1:], seq_lens_cpu_upper_bound=qsl[1:] + 10,
            num_reqs=len(qlens), num_actual_tokens=int(qsl[-1]), max_query_len=max(qlens), max_seq_len=20,
            block_table_tensor=torch.zeros(len(qlens), 1, dtype=torch.int32),
            slot_mapping=torch.zeros(int(qsl[-1]), dtype=torch.int64), is_prefilling=torch.tensor(pref))
        nd, np_, _, _ = split_decodes_and_prefills(cm, decode_threshold=thr, treat_short_extends_as_decodes=False)
        cases.append(((list(qlens), list(pref), thr), (nd, np_)))
    return cases


def _ex_04_3():
    cases = []
    for graph, own in [([1, 2, 3, 0], [1, 2, 4]), ([5, 6, 0, 0], [5, 6]), ([3, 1, 2, 0], [1, 2, 3])]:
        cases.append(((list(graph), list(own)), [i for i in range(len(own)) if graph[i] != own[i]]))
    return cases


def _ex_05_1():
    from mambalab.lab.planted import repeat_last_live

    cases = []
    for slots, nd in [([3, 5, 0, 0], 2), ([7, 2, 9, 4, 0, 0, 0, 0], 1), ([0, 0], 0), ([4, 9, 2, 1], 3),
                      ([6, 8], 2)]:
        cases.append(((list(slots), nd), repeat_last_live(slots, nd)))
    return cases


class Needs:
    """A failure predicate with a readable repr: the list still holds all of ``items`` (in any order)."""

    def __init__(self, *items) -> None:
        self.items = items

    def __call__(self, xs: list) -> bool:
        return all(x in xs for x in self.items)

    def __repr__(self) -> str:
        return f"Needs{self.items!r}"


class SumAtLeast:
    """A failure predicate: the list's sum reaches ``total``."""

    def __init__(self, total: int) -> None:
        self.total = total

    def __call__(self, xs: list) -> bool:
        return sum(xs) >= self.total

    def __repr__(self) -> str:
        return f"SumAtLeast({self.total})"


def _ex_05_2():
    from mambalab.lab.shrink import drop_one_at_a_time

    cases = []
    for items, fails in [([1, 3, 5, 7, 9], Needs(3, 7)), ([4, 1, 4, 2], SumAtLeast(8)),
                         (["add r0", "add r1", "abort r1", "add r2"], Needs("add r1", "abort r1")),
                         ([2, 2, 2], SumAtLeast(2)), ([5], Needs(5))]:
        cases.append(((list(items), fails), drop_one_at_a_time(items, fails)))
    return cases


EXERCISES: dict[str, Exercise] = {e.id: e for e in [
    Exercise("00.1", "num_reqs_padded", "rows a FULL decode graph runs for num_reqs one-token requests",
             _ex_00_1),
    Exercise("00.2", "slot_of", "the slot of token position pos of a request whose block-table row is row",
             _ex_00_2),
    Exercise("00.3", "state_floats", "floats of state one request keeps in the tiny model, whatever its length",
             _ex_00_3),
    Exercise("01.1", "first_element", "the element offset that state_ptr + idx * stride(0) points at", _ex_01_1),
    Exercise("01.2", "skipped_rows", "rows the fixed kernel skips (index <= 0)", lambda: _guard_cases("skipped")),
    Exercise("01.3", "null_block_writers", "rows that write the null block under the '< 0' guard",
             lambda: _guard_cases("writers")),
    Exercise("02.1", "device_after_commit", "the device table after commit_block_table(n)", _ex_02_1),
    Exercise("02.2", "dummy_blocks", "the live state blocks a dummy batch of n rows reads and writes", _ex_02_2),
    Exercise("02.3", "cpu_column0", "the CPU block table's column 0 after adds and finishes (fixed or buggy)",
             _ex_02_3),
    Exercise("03.1", "state_indices_width", "columns of the persistent state_indices_tensor_d in 'all' mode",
             _ex_03_1),
    Exercise("03.2", "block_indices", "(last_computed, first_scheduled, last_scheduled) block indices", _ex_03_2),
    Exercise("03.3", "initial_state_slot", "the slot a spec-decode row starts from after the fixed gather",
             _ex_03_3),
    Exercise("04.1", "is_prefilling_fixed", "is_prefilling over the padded rows, as after #41873", _ex_04_1),
    Exercise("04.2", "mamba_split", "(num_decodes, num_prefills) as Mamba splits a batch", _ex_04_2),
    Exercise("04.3", "rows_on_wrong_state", "live rows whose graph slot is not their own", _ex_04_3),
    Exercise("05.1", "pad_tail", "a graph buffer column with its padded entries filled by the planted bug",
             _ex_05_1),
    Exercise("05.2", "shrink_list", "a 1-minimal failing list, dropping one item at a time", _ex_05_2),
    Exercise("06.1", "state_bytes_moved", "bytes of state one SSU decode call moves (read + write)",
             lambda: _gpu_report_cases("06.1")),
    Exercise("06.2", "null_programs", "programs of a padded SSU launch that only write zeros",
             lambda: _gpu_report_cases("06.2")),
]}


def _gpu_report_cases(exercise_id: str):
    """The GPU chapter's cases live with its report module (imported on demand)."""
    from mambalab.gpu.gpu_report import exercise_cases

    return exercise_cases(exercise_id)
