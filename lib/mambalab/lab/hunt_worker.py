"""A worker process for the hunter's runs, so that a real CUDA fault ends the worker, not the hunt.

On the CPU the sanitizer stops an illegal access before it happens and the
engine reports it as a verdict. On a GPU nothing stops it: the hardware
faults, and the CUDA context of the process is left broken (every later
CUDA call fails with the same sticky error). A hunt runs hundreds of
workloads, and its shrinking hundreds more, some of which fault on purpose
(the pre-fix ``zero-accepted`` reads column ``-1``). So on CUDA the hunter
runs them in a :class:`Worker`: a child process, *spawned* (a forked child
cannot use its parent's CUDA context), that serves runs one after another
until one leaves its context unusable; it then reports that run and exits,
and the next run starts a fresh worker. The cost is one worker start
(importing torch, creating a context, loading the kernels from Triton's
cache) per fault, not per workload.

vLLM isolates its GPU workers the same way (``vllm/v1/executor/multiproc_executor.py``:
one process per worker, and a dead worker is reported, not inherited).
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing as mp
import pickle
import sys
from typing import Any, Callable


class WorkerDied(RuntimeError):
    """The worker process ended in the middle of a call (a crash of the process itself)."""

    def __init__(self, exitcode: int | None, what: str):
        self.exitcode = exitcode
        super().__init__(f"the worker process died (exit code {exitcode}) while running {what}")


def context_healthy() -> tuple[bool, str]:
    """Whether this process can still use its GPU (always, on the CPU); the error when not."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return True, ""
    try:
        torch.cuda.synchronize()
        torch.zeros(1, device="cuda").add_(1).item()
    except Exception as e:  # noqa: BLE001 - a sticky CUDA error: the context is gone
        return False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return True, ""


def _serve(conn) -> None:
    """The worker's loop: run each ``(fn, args)`` and send back the result or the exception."""
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        fn, args = job
        try:
            out: tuple = ("ok", fn(*args))
        except Exception as e:  # noqa: BLE001 - re-raised in the parent
            out = ("raise", e)
        healthy, error = context_healthy()
        if out[0] == "raise":
            try:  # the parent must be able to unpickle it, or its recv() would fail instead
                pickle.loads(pickle.dumps(out[1]))
            except Exception:  # noqa: BLE001
                e = out[1]
                out = ("raise", RuntimeError(f"{type(e).__name__}: {e}"))
        conn.send((*out, healthy, error))
        if not healthy:
            return


@contextlib.contextmanager
def _main_not_inherited():
    """While a child starts: keep a spawned (or forkserver) child from re-running the parent's
    ``__main__`` script, as multiprocessing does by default. The worker runs only functions of
    mambalab's modules; a script without an ``if __name__ == "__main__"`` guard (a notebook's
    helper, a benchmark) would otherwise run again, hunt included, in every worker."""
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
    try:
        for k in saved:
            setattr(main, k, None) if k == "__spec__" else delattr(main, k)
        yield
    finally:
        for k, v in saved.items():
            setattr(main, k, v)


class Worker:
    """One spawned child process that runs module-level functions for the parent.

    :meth:`call` returns ``(result, healthy, error)``: ``healthy`` is False
    when the call left the child's CUDA context unusable; the child has then
    exited and the next call starts a new one. An exception raised by the
    function is raised again here; :class:`WorkerDied` when the child itself
    died during the call.
    """

    def __init__(self, method: str = "spawn") -> None:
        self._proc = None
        self._conn = None
        self._busy: str | None = None  # what the child is running (between submit and collect)
        self.method = method  # "spawn" on CUDA; a pool on the CPU may fork from a forkserver
        self.starts = 0  # how many processes this worker has started

    def _start(self) -> None:
        ctx = mp.get_context(self.method)
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(child,), daemon=True, name="mambalab-hunt-worker")
        with _main_not_inherited():
            proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        self.starts += 1

    def call(self, fn: Callable, *args: Any) -> tuple[Any, bool, str]:
        self.submit(fn, *args)
        return self.collect()

    @property
    def busy(self) -> bool:
        """Whether a :meth:`submit` waits for its :meth:`collect`."""
        return self._busy is not None

    @property
    def pid(self) -> int | None:
        """The child's process id (None before it starts and after it ends)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def connection(self):
        """The pipe a submitted call's answer arrives on (for ``multiprocessing.connection.wait``)."""
        return self._conn

    def submit(self, fn: Callable, *args: Any) -> None:
        """Start ``fn(*args)`` in the child and return at once; :meth:`collect` waits for it."""
        assert self._busy is None, "collect() the previous call first"
        if self._proc is None or not self._proc.is_alive():
            self.close()
            self._start()
        self._busy = getattr(fn, "__qualname__", repr(fn))
        try:
            self._conn.send((fn, args))
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass  # collect() reports the dead child

    def collect(self) -> tuple[Any, bool, str]:
        """The submitted call's ``(result, healthy, error)``, as :meth:`call` returns it."""
        what, self._busy = self._busy, None
        assert what is not None, "nothing was submitted"
        try:
            status, value, healthy, error = self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            self._proc.join(timeout=30)
            code = self._proc.exitcode
            self._proc = self._conn = None
            raise WorkerDied(code, what) from None
        if not healthy:
            self._proc.join(timeout=30)
            self._proc = self._conn = None
        if status == "raise":
            raise value
        return value, healthy, error

    def close(self) -> None:
        """Stop the child (if any; one still running a call is killed)."""
        if self._busy is not None and self._proc is not None:
            self._proc.kill()
        self._busy = None
        if self._conn is not None:
            try:
                self._conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self._conn.close()
        if self._proc is not None:
            self._proc.join(timeout=10)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()
        self._proc = self._conn = None


_WORKER: Worker | None = None


def shared_worker() -> Worker:
    """The process-wide worker of the hunter (started on first use, stopped at exit)."""
    global _WORKER
    if _WORKER is None:
        _WORKER = Worker()
        atexit.register(_WORKER.close)
    return _WORKER


__all__ = ["Worker", "WorkerDied", "context_healthy", "shared_worker"]
