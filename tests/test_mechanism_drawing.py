"""The guard grid's access maps drawn once per content (widgets/mechanism._access_map_png): the PNG of a
fresh drawing for every combination, shared only by launches that recorded the same log over a pool of
the same size."""

from __future__ import annotations

import types

import pytest

from mambalab.device import INTERPRET, without_overflow_asserts
from mambalab.lab.bugs import BugConfig
from mambalab.widgets import mechanism

pytestmark = pytest.mark.skipif(not INTERPRET, reason="the guard is planted in the interpreter's kernels")


def _launch(pad, guard, slots=8):
    from mambalab.workbook.fix_it import guard_plants, planted
    from mambalab.workbook.kernel_launch import launch_ssu

    bugs = BugConfig.with_bugs("pad-minus-one") if pad == -1 else BugConfig()
    with planted(guard_plants(mechanism.GUARDS[guard][1])), without_overflow_asserts():
        return launch_ssu([3, 5, 2, pad], bugs, slots=slots)


def test_every_combination_s_drawing_is_a_fresh_drawing_s_png():
    mechanism._DRAWN.clear()
    seen = {}
    for pad in (-1, 0):
        for guard in mechanism.GUARDS:
            launch = _launch(pad, guard)
            png = mechanism._access_map_png(launch)
            assert png == mechanism._png(launch.draw_access_map()), (pad, guard)
            seen.setdefault(png, []).append((pad, guard))
    # three drawings for eight combinations: a fault on the pad row, the pad row skipped (whatever the pad
    # value: the drawing shows slots, not indices), the null block loaded and stored
    assert sorted(map(sorted, seen.values())) == sorted(map(sorted, [
        [(-1, "NONE"), (-1, "EQ_NULL")], [(-1, "NEGATIVE"), (-1, "NULL"), (0, "EQ_NULL"), (0, "NULL")],
        [(0, "NONE"), (0, "NEGATIVE")]]))
    assert len(mechanism._DRAWN) < 8  # one per distinct log (the two skipping pads' logs differ, not their drawing)


def test_the_same_log_over_another_pool_size_is_another_drawing():
    from mambalab import viz

    mechanism._DRAWN.clear()
    launch = _launch(0, "NULL")
    wider = types.SimpleNamespace(log=launch.log, num_slots=launch.num_slots + 2,
                                  draw_access_map=lambda: viz.draw_access_map(launch.log, num_slots=launch.num_slots + 2))
    a, b = mechanism._access_map_png(launch), mechanism._access_map_png(wider)
    assert a != b and b == mechanism._png(wider.draw_access_map())
