"""Work a panel does while the learner reads: on the kernel's own event loop, one small unit at a time.

After each action a panel plans work that the learner's *next* action is
likely to need, and that changes nothing the learner sees: the per-request
references of the shown workload (Replay and the verdict need them), and the
session of the other side of the fix toggle, built and brought to the step
shown (with "verdict on every change": run to the end and judged). When the
learner then toggles the fix, the session is found in the cache, and only
the redraw is left.

How it runs, and why it is safe:

* never on a thread: each unit is a callback of the event loop that is
  running when the action ends (in Jupyter, the kernel's loop on the main
  thread, between two messages), so it never runs at the same time as an
  action, a redraw or a CUDA-graph capture;
* one unit per callback (an engine's construction, one engine step, one
  reference), so a click waits at most one unit; the first unit starts
  :data:`IDLE_DELAY_S` after the action, and any new action drops the old
  plan;
* never the shown engine: the engine shown steps only when the learner
  steps, and Replay steps that engine (``tests/test_widgets.py``);
* what it computes is what the action would compute (sessions are
  deterministic and cached by settings), so what the learner sees is the
  same, only sooner;
* headless (tests, scripts) no loop runs and nothing is scheduled:
  :meth:`IdleWork.drain` runs the plan on demand (``Panel.run_idle_work``);
* the learner's actions leave Python's full garbage collection to idle time
  (:func:`learner_action`); a plan's last unit runs it if one is due.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from typing import Callable, Iterator

IDLE_DELAY_S = 0.25  # after an action, before the first unit (a quick second click goes first)
BETWEEN_UNITS_S = 0.01  # between two units: the loop reads waiting messages (a click) before the next
MAX_DEFERRED_ACTIONS = 100  # actions in a row that may leave the full collection to idle time (~1,200 objects each)

_ACTIONS = {"depth": 0, "deferred": 0}


def _on_collection(phase: str, info: dict) -> None:
    """A full collection of everything (none frozen) has run: actions may defer the next one again."""
    if phase == "stop" and info.get("generation") == 2 and gc.get_freeze_count() == 0:
        _ACTIONS["deferred"] = 0


gc.callbacks.append(_on_collection)


def collect_deferred() -> None:
    """The full collection the learner's actions deferred, now (a new panel: a cell run, before its build)."""
    if _ACTIONS["deferred"] and not _ACTIONS["depth"] and gc.isenabled() and gc.get_freeze_count() == 0:
        gc.collect()


@contextlib.contextmanager
def learner_action():
    """A learner's action (a step, a toggle, a knob change) without Python's full garbage collection.

    The objects alive when the action starts (engines, snapshots, figures, the interpreter's caches: some
    270,000 in a notebook) are frozen (``gc.freeze``) for its duration, so a collection triggered inside
    scans what the action allocates, not them: a full collection over them took ~120 ms on the 2-core
    machine, added to whichever action met it. They are unfrozen after it, and the full collection runs
    outside the actions: in idle time (the idle plan's last unit, or an engine step's allocations), when
    a new panel is built (:func:`collect_deferred`) or, after :data:`MAX_DEFERRED_ACTIONS` actions with
    none, in the next action. Nothing is kept longer than that,
    and nothing is computed differently. Nested actions freeze once; objects someone else froze are left
    alone, so a Python that starts with frozen objects (the lent GPU machine's: 375) never freezes here and
    collects as it did before."""
    outer = _ACTIONS["depth"] == 0
    freeze = (outer and gc.isenabled() and gc.get_freeze_count() == 0
              and _ACTIONS["deferred"] < MAX_DEFERRED_ACTIONS)
    _ACTIONS["depth"] += 1
    if freeze:
        _ACTIONS["deferred"] += 1
        gc.freeze()
    try:
        yield
    finally:
        _ACTIONS["depth"] -= 1
        if freeze:
            gc.unfreeze()


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running on this thread (Jupyter's kernel loop), or None (headless)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class IdleWork:
    """A plan of units (an iterator; each ``next`` does one unit), run on the event loop while nothing else runs."""

    def __init__(self, plan: Callable[[], Iterator[None]], run_unit: Callable[[Callable[[], bool]], bool | None],
                 enabled: bool = True) -> None:
        self._plan = plan
        self._run_unit = run_unit  # runs one unit under the panel's callback guard
        self._units: Iterator[None] | None = None
        self._handle: asyncio.TimerHandle | None = None
        self.enabled = enabled
        self.done = 0  # units run so far (all plans)

    @property
    def scheduled(self) -> bool:
        return self._handle is not None

    def restart(self) -> None:
        """After an action: drop the old plan, make a new one, and schedule it if an event loop runs here."""
        self.cancel()
        if not self.enabled:
            return
        self._units = self._plan()
        loop = running_loop()
        if loop is not None:
            self._handle = loop.call_later(IDLE_DELAY_S, self._tick)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._units = None

    def step(self) -> bool:
        """Run one unit of the plan; False when nothing is left."""
        if self._units is None:
            return False
        try:
            next(self._units)
        except StopIteration:
            self._units = None
            if not _ACTIONS["deferred"]:
                return False
            gc.collect()  # the last unit: the full collection the actions left to idle time
        self.done += 1
        return True

    def drain(self) -> int:
        """Run the whole plan now (headless: the learner's pause, as tests and benchmarks need it)."""
        if self._units is None and self.enabled:
            self._units = self._plan()
        n = 0
        while self._run_unit(self.step):
            n += 1
        return n

    def _tick(self) -> None:
        self._handle = None
        if self._run_unit(self.step):
            loop = running_loop()
            if loop is not None and self._units is not None:
                self._handle = loop.call_later(BETWEEN_UNITS_S, self._tick)


__all__ = ["IdleWork", "IDLE_DELAY_S", "running_loop", "learner_action", "collect_deferred"]
