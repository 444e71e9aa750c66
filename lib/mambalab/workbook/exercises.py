"""The exercises: one :class:`Exercise` per question of the notebooks, in the registry :data:`EXERCISES`.

Each draws random cases (property style: ``CASES`` of them, seeded by the exercise id, so the
same on every run); every expected answer is computed with the library (the dispatcher, the
block table, the metadata builder, ``GuardMode``, the GPU report's formulas), never with a
solution. The checker is :mod:`mambalab.workbook.checker`."""

from __future__ import annotations

import random
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


CASES = 40  # random cases per exercise (seeded by the exercise id: the same on every run)


@dataclass
class Exercise:
    """A question: ``cases(rng)`` draws one random ``(args, expected)``; :meth:`cases` returns ``CASES`` of them."""

    id: str
    name: str  # the function the learner writes
    task: str
    draw: Callable[[random.Random], tuple[tuple, Any]]
    count: int = CASES

    def cases(self) -> list[tuple[tuple, Any]]:
        rng = random.Random(f"mambalab exercise {self.id}")
        return [self.draw(rng) for _ in range(self.count)]

    def describe_args(self, args: tuple) -> str:
        def one(a):
            if isinstance(a, torch.Tensor):
                return f"tensor{tuple(a.shape)}"
            return repr(a)
        return ", ".join(one(a) for a in args)


def _padded(n: int, m: int) -> int:
    """Rows of the FULL decode graph for ``n`` one-token requests, ``max_num_seqs = m`` (the dispatcher's answer)."""
    return dispatch(n, n, uniform_decode=True, capture_sizes=default_capture_sizes(m), max_num_seqs=m).num_reqs_padded


def _ex_00_1(rng):
    m = rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 100, 128])
    n = rng.randint(1, m)
    return (n, m), _padded(n, m)


def _ex_00_2(rng):
    from mambalab.worker.block_table import BlockTable

    bs = rng.choice([1, 2, 4, 8, 16])
    row = rng.sample(range(1, 40), rng.randint(1, 5))
    pos = rng.randrange(len(row) * bs)
    bt = BlockTable(bs, 1, len(row), 8, device="cpu")
    bt.add_row(row, 0)
    bt.compute_slot_mapping(np.array([0]), np.array([pos]))
    return (list(row), pos, bs), int(bt.slot_mapping.np[0])


def _ex_00_3(rng):
    """Blocks a pool needs for ``num_reqs`` requests of ``max_model_len`` tokens at once (null block included)."""
    mode = rng.choice(["none", "all"])
    bs, ns = rng.choice([4, 8, 16]), rng.randint(0, 3)
    length, n = rng.randint(1, 80), rng.randint(1, 8)
    spec = MambaSpec(bs, mode, ns)
    return (mode, length, bs, ns, n), n * spec.max_num_blocks_per_req(length) + 1


def _ex_01_1(rng):
    shape = [rng.randint(2, 6) for _ in range(rng.randint(2, 4))]
    base = torch.zeros(*shape)
    view = rng.choice(["whole", "slice", "transpose"])
    t = base if view == "whole" else (base[:, 1:] if view == "slice" else base.transpose(-1, -2))
    idx = rng.choice([-1, 0, rng.randrange(1, shape[0])])
    return (t, idx), idx * t.stride(0)


GUARDS = ("NONE", "EQ_NULL", "NEGATIVE", "NULL")


def _ex_01_2(rng):
    """What a kernel under a guard does with a row's state index: illegal, null block, own slot or skipped."""
    from mambalab.lab.bugs import GuardMode

    guard, idx = rng.choice(GUARDS), rng.choice([-1, 0, rng.randint(1, 9)])
    if not GuardMode[guard].is_live(idx):
        effect = "skipped"
    else:
        effect = "illegal" if idx < 0 else ("null block" if idx == NULL_BLOCK_ID else "own slot")
    return (idx, guard), effect


def _ex_01_3(rng):
    """Launches in order under the '< 0' guard: the (launch, row) pairs that load a dirty null block."""
    from mambalab.lab.bugs import GuardMode

    g = GuardMode.NEGATIVE
    launches = [[rng.choice([0, 0, -1] + list(range(1, 8))) for _ in range(rng.randint(1, 4))]
                for _ in range(rng.randint(1, 4))]
    dirty, out = False, []
    for s, idxs in enumerate(launches):
        touches = [r for r, i in enumerate(idxs) if g.is_live(i) and i == NULL_BLOCK_ID]
        if dirty:
            out += [(s, r) for r in touches]
        dirty = dirty or bool(touches)
    return ([list(x) for x in launches],), out


def _table(rng, rows: int, cols: int) -> list[list[int]]:
    return [[rng.choice([0, rng.randint(1, 20)]) for _ in range(cols)] for _ in range(rows)]


def _ex_02_1(rng):
    from mambalab.worker.block_table import BlockTable

    rows, cols = rng.randint(2, 6), rng.randint(1, 3)
    cpu, dev, n = _table(rng, rows, cols), _table(rng, rows, cols), rng.randint(0, rows)
    bt = BlockTable(64, rows, cols, 8, device="cpu")
    bt.block_table.gpu.copy_(torch.tensor(dev, dtype=torch.int32))
    bt.block_table.np[:] = np.array(cpu, dtype=np.int32)
    bt.commit_block_table(n)
    return (cpu, dev, n), bt.block_table.gpu.tolist()


def _ex_02_2(rng):
    dev, n = _table(rng, rng.randint(1, 8), 1), None
    n = rng.randint(1, len(dev))
    return (dev, n), sorted({r[0] for r in dev[:n]} - {NULL_BLOCK_ID})


def _ops(rng) -> tuple[str, ...]:
    """A random valid sequence of adds and finishes on a 4-row batch (request ids r0, r1, ...)."""
    live, ops, k = [], [], 0
    for _ in range(rng.randint(1, 8)):
        if live and (len(live) == 4 or rng.random() < 0.4):
            rid = live.pop(rng.randrange(len(live)))
            ops.append(f"finish {rid}")
        else:
            live.append(f"r{k}")
            ops.append(f"add r{k}")
            k += 1
    return tuple(ops)


def _ex_02_3(rng):
    """After adds and finishes on the pre-fix or fixed batch: the CPU block table's column 0."""
    seq, buggy = _ops(rng), rng.random() < 0.5
    w = MiniWorld(BugConfig.with_bugs("stale-rows") if buggy else BugConfig(), num_blocks=8)
    for op in seq:
        verb, rid = op.split()
        (w.add if verb == "add" else w.finish)(rid)
    return (seq, buggy), [int(b) for b in w.block_table.block_table.np[:, 0]]


def _ex_03_1(rng):
    L, B, ns = rng.randint(8, 300), rng.choice([4, 8, 16, 32]), rng.randint(0, 3)
    b = MambaAttentionMetadataBuilder(MambaSpec(B, "all", ns), L, 4, 8, ns, device="cpu")
    return (L, B, ns), int(b.state_indices_tensor_d.shape[1])


def _ex_03_2(rng):
    from mambalab.attention.mamba_metadata import _cdiv_t

    B = rng.choice([2, 4, 8, 16])
    nc = rng.randint(0, 40)
    seq = nc + rng.randint(1, 4)
    t_nc, t_seq = torch.tensor([nc]), torch.tensor([seq])
    last_computed = int(torch.clamp(_cdiv_t(t_nc, B) - 1, min=0))
    first_sched = int(_cdiv_t(t_nc + 1, B) - 1)
    last_sched = int(torch.clamp(_cdiv_t(t_seq, B) - 1, min=0))
    return (nc, seq, B), (last_computed, first_sched, last_sched)


def _ex_03_3(rng):
    ns = rng.randint(1, 3)
    row = rng.sample(range(1, 30), rng.randint(2 + ns, 8))
    anchor, acc = rng.randint(0, len(row) - 1 - ns), rng.randint(1, 1 + ns)
    d = torch.tensor([row], dtype=torch.int64)
    src = d.gather(1, torch.tensor([[anchor]]) + torch.arange(1 + ns))  # the fixed gather
    return (list(row), anchor, acc), int(src[0, acc - 1])


def _ex_04_1(rng):
    padded = rng.randint(1, 8)
    n = rng.randint(0, padded)
    npr = [rng.randint(1, 60) for _ in range(padded)]
    nc = [rng.choice([p, rng.randint(0, p)]) for p in npr]
    ib = InputBatch(padded, 256, 64, [MambaSpec(256, "none", 0)], device="cpu")
    ib.num_computed_tokens_cpu[:] = nc
    ib.num_prompt_tokens[:] = npr
    buf = RunnerBuffers(padded, 64, device="cpu")
    (cm,) = build_attention_metadata(ib, buf, n, padded, padded, 1, BugConfig())
    return (nc, npr, n, padded), [bool(x) for x in cm.is_prefilling.tolist()]


def _mamba_split(qlens: list[int], pref: list[bool], thr: int) -> tuple[int, int]:
    """(num_decodes, num_prefills) from the library's split, as the Mamba builder calls it."""
    from mambalab.attention.metadata import CommonAttentionMetadata, split_decodes_and_prefills

    qsl = torch.tensor([0] + list(np.cumsum(qlens)), dtype=torch.int32)
    cm = CommonAttentionMetadata(
        query_start_loc=qsl, query_start_loc_cpu=qsl, seq_lens=qsl[1:], seq_lens_cpu_upper_bound=qsl[1:] + 10,
        num_reqs=len(qlens), num_actual_tokens=int(qsl[-1]), max_query_len=max(qlens), max_seq_len=20,
        block_table_tensor=torch.zeros(len(qlens), 1, dtype=torch.int32),
        slot_mapping=torch.zeros(int(qsl[-1]), dtype=torch.int64), is_prefilling=torch.tensor(pref))
    nd, np_, _, _ = split_decodes_and_prefills(cm, decode_threshold=thr, treat_short_extends_as_decodes=False)
    return nd, np_


def _ex_04_2(rng):
    thr = rng.choice([1, 1, 2, 3])
    live = sorted(rng.choice([1, 1, thr, thr + 1, 5]) for _ in range(rng.randint(1, 5)))
    qlens = live + [0] * rng.randint(0, 3)
    pref = [rng.random() < 0.25 for _ in qlens]
    return (qlens, pref, thr), _mamba_split(qlens, pref, thr)


def _ex_04_3(rng):
    """Live rows of a step that run on a slot not their own: FULL graph (all live rows one token), refresh
    skipped (the Mamba split finds a prefill), and the previous buffer's entry differs from the row's block."""
    n = rng.randint(1, 4)
    padded = n + rng.randint(0, 2)
    prev = [rng.randint(0, 6) for _ in range(padded)]
    own = rng.sample(range(1, 8), n)
    qlens = [rng.choice([1, 1, 1, 4]) for _ in range(n)]
    pref = [q > 1 for q in qlens] + [rng.random() < 0.5 for _ in range(padded - n)]
    full = all(q == 1 for q in qlens)
    _, num_prefills = _mamba_split(qlens + [0] * (padded - n), pref, 1)
    wrong = [i for i in range(n) if prev[i] != own[i]] if full and num_prefills else []
    return (prev, own, qlens, pref), wrong


def _ex_05_1(rng):
    from mambalab.lab.planted import repeat_last_live

    slots = [rng.randint(1, 9) for _ in range(rng.randint(1, 8))]
    nd = rng.randint(0, len(slots))
    slots = slots[:nd] + [rng.choice([0, rng.randint(1, 9)]) for _ in slots[nd:]]
    return (slots, nd), repeat_last_live(slots, nd)


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


def _ex_05_2(rng):
    from mambalab.lab.shrink import drop_one_at_a_time

    items = [rng.randint(1, 9) for _ in range(rng.randint(1, 7))]
    if rng.random() < 0.5:
        fails = Needs(*rng.sample(items, rng.randint(1, min(2, len(items)))))
    else:
        fails = SumAtLeast(rng.randint(1, sum(items)))
    return (items, fails), drop_one_at_a_time(items, fails)


def _ex_06_1(rng):
    from mambalab.gpu.gpu_report import ssu_bytes

    args = (rng.choice([4, 8, 32, 128]), rng.choice([16, 64, 128]), rng.choice([16, 64, 128]),
            rng.choice([2, 4]), rng.randint(1, 512))
    return args, ssu_bytes(*args)


def _ex_06_2(rng):
    """Programs of a padded SSU launch that only write zeros, for ``active`` requests replayed in the graph the
    dispatcher picks (``max_num_seqs``): the graph size first, then the grid."""
    from mambalab.gpu.gpu_report import null_programs

    m = rng.choice([4, 6, 8, 12, 16, 64, 100, 256])
    active = rng.randint(1, m)
    dim, block_m, nheads = rng.choice([16, 17, 64, 100]), rng.choice([4, 8, 16]), rng.choice([1, 3, 8, 128])
    return (dim, block_m, nheads, active, m), null_programs(dim, block_m, nheads, active, _padded(active, m))


EXERCISES: dict[str, Exercise] = {e.id: e for e in [
    Exercise("00.1", "num_reqs_padded", "rows a FULL decode graph runs for num_reqs one-token requests",
             _ex_00_1),
    Exercise("00.2", "slot_of", "the slot of token position pos of a request whose block-table row is row",
             _ex_00_2),
    Exercise("00.3", "pool_blocks", "blocks a pool needs for num_reqs requests of max_model_len tokens at once",
             _ex_00_3),
    Exercise("01.1", "first_element", "the element offset that state_ptr + idx * stride(0) points at", _ex_01_1),
    Exercise("01.2", "row_effect", "what a kernel under a guard does with a row's state index", _ex_01_2),
    Exercise("01.3", "dirty_reads", "(launch, row) pairs that load a dirty null block under the '< 0' guard",
             _ex_01_3),
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
    Exercise("04.3", "rows_on_wrong_state", "live rows a step runs on a slot not their own", _ex_04_3),
    Exercise("05.1", "pad_tail", "a graph buffer column with its padded entries filled by the planted bug",
             _ex_05_1),
    Exercise("05.2", "shrink_list", "a 1-minimal failing list, dropping one item at a time", _ex_05_2),
    Exercise("06.1", "state_bytes_moved", "bytes of state one SSU decode call moves (read + write)", _ex_06_1),
    Exercise("06.2", "null_programs", "programs that only write zeros when active requests replay a graph",
             _ex_06_2),
]}
