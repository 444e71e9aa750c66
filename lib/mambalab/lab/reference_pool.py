"""Per-request references computed in a second process while this one runs the engine (2 cores: both busy).

A panel's knob change that builds a new model (a new seed) needs the references of every request it shows
(greedy tokens of each request run alone, pure torch: ~40 ms for ``move-row-stale-source``'s four) and the
engine's replay to the step shown (Triton's interpreter: ~200 ms). Neither needs the other until the redraw,
so the session hands the references to :data:`POOL` as soon as its model exists and collects them when it
needs them (:func:`mambalab.lab.reference.reference_submit`; the reference memo asks :meth:`ReferencePool.take`
before computing anything).

Why the answers are the ones this process would compute:

* the worker (``lab/reference_worker.py``) computes with the caller's model itself, pickled (its weights'
  bytes and plain values), with the same ``greedy_ref`` / ``forward_ref`` calls the memo makes, the same
  torch (same interpreter, same installation) and the same count of torch threads;
* its code is the code on disk; a job is sent only while every module the worker loaded describes the same
  here (:func:`mambalab.lab.reference_worker.code_fingerprint`: bytecode, constants, defaults, closures):
  a plant or a monkeypatch of the model's code is computed in this process, as before;
* a job whose model uses the oracle drafter is not sent (the drafter's ``greedy_ref`` calls continue from
  the states the reference left in this process).

Why it is safe in a Jupyter kernel: the worker is a fresh interpreter (``subprocess``: fork + exec, no
Python runs between them), started at a panel's build and not waited for; until it says it is ready, and
whenever it is unavailable (died, too slow, not started, ``MAMBALAB_REFERENCE_POOL=0``, CUDA), everything is
computed in this process. It exits when this process closes its input (exit included).
"""

from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import time
from collections import OrderedDict

from mambalab.lab.reference_worker import MAX_MODELS
from mambalab.lab.worker_process import CodeCheck, recv, send, spawn, stop

MISSING = object()
GRACE_S = 0.005  # the longest a caller waits for an answer still on its way before computing it itself
# The worker's start-up in Linux's idle class (a panel's: it must never slow the engine). Off, it starts at the normal
# priority: the tests of its answers, whose fixture waits for it on a machine whose cores xdist keeps busy.
START_IDLE = True


def enabled() -> bool:
    """The pool is used: ``MAMBALAB_REFERENCE_POOL`` not ``0``, on the CPU, with at least two cores."""
    if os.environ.get("MAMBALAB_REFERENCE_POOL", "1") == "0":
        return False
    from mambalab.device import DEVICE_TYPE

    if DEVICE_TYPE != "cpu":
        return False
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return cpus >= 2 or os.environ.get("MAMBALAB_REFERENCE_POOL") == "1"


class ReferencePool:
    """One worker process computing references on request; see the module's docstring."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self._send = self._recv = None
        self.ready = False
        self.broken: str | None = None
        self.fingerprint: dict[str, str] = {}
        self._models: OrderedDict[str, None] = OrderedDict()  # model keys the worker holds, as it orders them
        self._next = 0
        self._jobs: dict[int, tuple] = {}  # job id -> (generation, model key, prompt, n), asked and not answered
        self._pending: dict[tuple, int] = {}  # greedy memo key -> job id
        self._done: dict[tuple, object] = {}  # memo key -> answer (greedy tokens, or a final state)
        self._generation = 0
        self._late = False  # an answer did not come in time since the last submit: do not wait again
        self._code: CodeCheck | None = None
        self.sent = self.served = self.late = 0

    # -- life ------------------------------------------------------------------------------------
    def start(self) -> bool:
        """Start the worker if it is not running (returns at once; it becomes usable when it says so)."""
        if self.proc is not None or self.broken is not None or not enabled():
            return self.proc is not None
        import torch

        started = spawn("mambalab.lab.reference_worker", [str(torch.get_num_threads()),
                                                          "idle" if START_IDLE else "normal"], start_idle=START_IDLE)
        if isinstance(started, str):
            self.broken = started
            return False
        self.proc, self._send, self._recv = started
        return True

    def close(self) -> None:
        """Stop the worker (it exits when its input closes) and forget everything asked."""
        stop(self.proc, (self._send, self._recv))
        self.proc = self._send = self._recv = None
        self.ready = False
        self._models.clear()
        self._jobs.clear()
        self._pending.clear()
        self._done.clear()

    def _give_up(self, why: str) -> None:
        self.broken = why
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        self.close()

    def forget(self) -> None:
        """Forget every answer (the reference memo was emptied): answers still on their way are dropped."""
        self._generation += 1
        self._pending.clear()
        self._done.clear()

    # -- messages ----------------------------------------------------------------------------------
    def _handle(self, msg) -> None:
        kind = msg[0]
        if kind == "ready":
            _, _pid, self.fingerprint, _threads = msg
            self.ready = True
            return
        job = self._jobs.pop(msg[1], None)
        if job is None:
            return
        generation, mkey, prompt, n = job
        if generation != self._generation:
            return
        self._pending.pop((mkey, f"greedy {n}", prompt), None)
        if kind == "done":
            _, _job, ref, state = msg
            self._done[(mkey, f"greedy {n}", prompt)] = ref
            if state is not None:
                self._done[(mkey, "state", prompt + ref[:-1])] = state
        elif msg[2] == "unknown model":
            self._models.pop(mkey, None)

    def poll(self, timeout: float = 0.0) -> bool:
        """Read what the worker has answered (waiting up to ``timeout`` for the first message)."""
        if self._recv is None:
            return False
        got = False
        try:
            while self._recv.poll(timeout):
                self._handle(recv(self._recv))
                got, timeout = True, 0.0
        except (EOFError, OSError, pickle.UnpicklingError) as e:
            self._give_up(f"the worker went away ({type(e).__name__})")
        return got

    def usable(self) -> bool:
        """Started, ready, and this process's code the worker's (as it loaded it)."""
        if self._recv is None or self.broken is not None:
            return False
        if not self.ready:
            self.poll()
            if not self.ready:
                return False
        return self._code_matches()

    def _code_matches(self) -> bool:
        """Every module the worker loaded describes the same here (:class:`~mambalab.lab.worker_process.CodeCheck`)."""
        if self._code is None or self._code.fingerprint is not self.fingerprint:
            self._code = CodeCheck(self.fingerprint)
        return self._code.matches()

    # -- jobs -----------------------------------------------------------------------------------------
    def pending(self, key: tuple) -> bool:
        return key in self._pending

    def submit(self, model, mkey: str, prompt: tuple, n: int, with_state: bool = False) -> bool:
        """Ask for ``greedy_ref(prompt, n)`` of ``model``, whose memo key is ``mkey`` (``with_state``: and the
        final state after it, which only a verdict reads: by default left to this process, so that the worker's
        burst beside the engine is as short as it can be, this machine's two cores slowing each other down
        while both run); False when not sent (the caller computes it when it needs it)."""
        key = (mkey, f"greedy {n}", prompt)
        self._late = False
        if key in self._pending or key in self._done:
            return True
        if self._send is None or self.broken is not None:
            return False
        self.poll()  # read answers first: neither side may wait on a full pipe
        try:
            if mkey not in self._models:
                send(self._send, ("model", mkey, pickle.dumps(model)))
                self._models[mkey] = None
                while len(self._models) > MAX_MODELS:
                    self._models.popitem(last=False)
            else:
                self._models.move_to_end(mkey)
            self._next += 1
            send(self._send, ("job", self._next, mkey, prompt, n, with_state))
        except (OSError, pickle.PicklingError, TypeError, AttributeError) as e:
            self._give_up(f"could not send: {type(e).__name__}: {e}")
            return False
        self._jobs[self._next] = (self._generation, mkey, prompt, n)
        self._pending[key] = self._next
        self.sent += 1
        return True

    def wait(self, timeout: float) -> bool:
        """Wait until every job asked has been answered (tests; True when none is left)."""
        deadline = time.monotonic() + timeout
        while self._pending and self._recv is not None and time.monotonic() < deadline:
            self.poll(min(0.1, max(0.0, deadline - time.monotonic())))
        return not self._pending

    def take(self, key: tuple):
        """The answer for a reference memo key, if it was asked for and comes within :data:`GRACE_S` (none
        after one that did not, until the next :meth:`submit`); else :data:`MISSING` (the caller computes
        it, and the worker's late answer is dropped). A busy machine that starves the worker costs at most
        one grace per knob change, never a wait for it."""
        if key not in self._done and self._recv is not None:
            mkey = key[0]
            state = key[1] == "state"
            deadline = time.monotonic() + (0.0 if self._late else GRACE_S)
            while True:
                self.poll()
                if key in self._done or self._recv is None or not (
                        key in self._pending or (state and any(k[0] == mkey for k in self._pending))):
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    self._late = True
                    self.late += 1
                    for k in [k for k in self._pending if k == key or (state and k[0] == mkey)]:
                        self._jobs.pop(self._pending.pop(k), None)
                    break
                self.poll(left)
        if key in self._done:
            self.served += 1
            return self._done.pop(key)
        return MISSING


POOL = ReferencePool()
atexit.register(POOL.close)


def start() -> bool:
    """Start the worker ahead of time (a panel's build); nothing happens when the pool is disabled."""
    return POOL.start()


__all__ = ["POOL", "ReferencePool", "MISSING", "enabled", "start"]
