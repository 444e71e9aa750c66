"""A helper process of the lab: its start, its scheduling classes and the check that the caller's code is still the
code it loaded (the references' worker: ``lab/reference_pool.py``, ``lab/reference_worker.py``).

A helper is a fresh interpreter (``subprocess``: fork + exec, never a bare fork of a process whose torch threads are
up), started in Linux's idle class (its start-up, torch's import, only uses a core nothing else wants) and serving at
the normal priority once ready, where the user may leave the idle class; it talks over two pipes (plain pickle) and
exits when its input closes.
"""

from __future__ import annotations

import operator
import os
import pickle
import subprocess
import sys
import types
from pathlib import Path


def child_env(base: dict | None = None, **extra: str) -> dict[str, str]:
    """The environment of a helper process: ``base`` (this process's environment by default) with ``extra``
    set, and mambalab's ``lib/`` first on ``PYTHONPATH``, so that the child imports the caller's mambalab."""
    env = dict(os.environ if base is None else base, **extra)
    lib = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = lib + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def spawn(module: str, args: list[str], *, start_idle: bool):
    """Start ``python -m module IN_FD OUT_FD *args``; returns ``(proc, to_worker, from_worker)`` (two
    ``Connection``s), or a string saying why it could not start. ``start_idle``: the child is put in the idle class
    at once, before it imports anything."""
    from multiprocessing.connection import Connection

    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()
    env = child_env()
    try:
        proc = subprocess.Popen([sys.executable, "-m", module, str(to_r), str(from_w), *args],
                                pass_fds=(to_r, from_w), env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL)
    except OSError as e:
        for fd in (to_r, to_w, from_r, from_w):
            os.close(fd)
        return f"could not start: {e}"
    os.close(to_r)
    os.close(from_w)
    try:  # at once, before the worker imports torch: it runs only on a core nothing else wants (Linux)
        if start_idle:
            os.sched_setscheduler(proc.pid, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        pass
    return proc, Connection(to_w, readable=False), Connection(from_r, writable=False)


def stop(proc, conns) -> None:
    """Close the worker's pipes (it exits when its input closes) and wait for it (killed after 2 s)."""
    for c in conns:
        if c is not None:
            try:
                c.close()
            except OSError:
                pass
    if proc is not None:
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def enter_idle_class() -> None:
    """In a worker, at its start (``idle`` given): Linux's idle class (else the lowest nice)."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        try:
            os.nice(19)
        except (AttributeError, OSError):
            pass


def leave_idle_class() -> None:
    """In a worker, once ready: its jobs are short bursts beside the engine, served at the normal priority where
    the user may (an idle-class worker on a busy core answers late)."""
    try:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    except (AttributeError, OSError):
        pass


def connections(argv: list[str]):
    """In a worker: its input and output ``Connection``s from the two descriptors it was given."""
    from multiprocessing.connection import Connection

    return Connection(int(argv[0]), writable=False), Connection(int(argv[1]), readable=False)


def send(conn, msg) -> None:
    """``msg`` pickled by plain pickle (a ``Connection.send`` would share tensors through torch's
    multiprocessing reductions, which need a multiprocessing parent)."""
    conn.send_bytes(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))


def recv(conn):
    return pickle.loads(conn.recv_bytes())


class CodeCheck:
    """Whether the modules a worker loaded describe the same here as there (``fingerprint``: the worker's
    :func:`~mambalab.lab.reference_worker.code_fingerprint`). Checked in full only when a namespace changed since
    the last match (a snapshot holds the very objects, compared by identity: 0.1-0.3 ms; 7 ms in full)."""

    def __init__(self, fingerprint: dict[str, str]) -> None:
        self.fingerprint = fingerprint
        self._checked: tuple | None = None

    def _namespaces(self) -> tuple:
        mods = [sys.modules.get(n) for n in self.fingerprint]
        spaces = [vars(m) for m in mods if m is not None]
        spaces += [vars(v) for m in mods if m is not None for v in list(vars(m).values())
                   if isinstance(v, type) and v.__module__ == m.__name__]
        return tuple((tuple(d), tuple(d.values()),
                      tuple((f.__code__, f.__defaults__, f.__kwdefaults__) for f in d.values()
                            if isinstance(f, types.FunctionType)))
                     for d in spaces)

    def matches(self) -> bool:
        now = self._namespaces()
        old = self._checked
        if old is not None and len(old) == len(now) and all(
                a[0] == b[0] and all(map(operator.is_, a[1], b[1])) and len(a[2]) == len(b[2])
                and all(x is y for p, q in zip(a[2], b[2]) for x, y in zip(p, q))
                for a, b in zip(old, now)):
            return True
        from mambalab.lab.reference_worker import code_fingerprint

        if code_fingerprint(self.fingerprint) != self.fingerprint:
            self._checked = None
            return False
        self._checked = now
        return True


__all__ = ["CodeCheck", "connections", "enter_idle_class", "leave_idle_class", "recv", "send", "spawn", "stop"]
