"""The process that computes per-request references beside the engine (``lab/reference_pool.py``).

Run as ``python -m mambalab.lab.reference_worker IN_FD OUT_FD THREADS``: a fresh interpreter started with
``subprocess`` (fork + exec, never a bare fork of a process whose torch threads are up), which imports the
model's code, runs the reference once (:func:`reference_modules`), answers ``("ready", pid, fingerprint, threads)`` and then serves, one at a
time and in the order asked:

* ``("model", key, pickled model)``: a model to compute with (the very weights of the caller's model; kept
  by key, the :data:`MAX_MODELS` last);
* ``("job", job_id, key, prompt, n, with_state)``: ``greedy_ref(prompt, n)`` of that model, and (asked
  for) ``forward_ref``'s final state after ``prompt + reference[:-1]``, exactly what :func:`mambalab.lab.reference.reference_output` and
  :func:`~mambalab.lab.reference.reference_final_state` compute in the caller's process; answered
  ``("done", job_id, reference, state)`` or ``("error", job_id, text)``.

It exits when its input closes (the caller exited, or closed it).

:func:`code_fingerprint` describes the code of the modules the reference runs in a form two processes can
compare (functions by their bytecode, constants and names, never by ``id``): the caller uses a worker's
answers only while its own modules describe the same, so a plant or a monkeypatch of the model's code in the
caller is computed in the caller, as before. (Modules the reference never runs are left out: some hold
per-process values, e.g. the sanitizer's safe address.)
"""

from __future__ import annotations

import hashlib
import pickle
import sys
import types
from collections import OrderedDict

from mambalab.lab.worker_process import connections, enter_idle_class, leave_idle_class, recv, send

MAX_MODELS = 16
_PLAIN = (bool, int, float, str, bytes, type(None))


def _const(c, h) -> None:
    if isinstance(c, types.CodeType):
        _code(c, h)
    elif isinstance(c, (frozenset, set)):  # iteration order follows the process's string hashing
        h.update(repr(sorted(map(repr, c))).encode())
    elif isinstance(c, tuple):
        h.update(b"(")
        for x in c:
            _const(x, h)
        h.update(b")")
    else:
        h.update(repr(c).encode())
    h.update(b";")


def _code(code: types.CodeType, h) -> None:
    h.update(code.co_code)
    h.update(repr((code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars, code.co_argcount,
                   code.co_kwonlyargcount, code.co_flags)).encode())
    for c in code.co_consts:
        _const(c, h)


def _value(v, h, depth: int = 0) -> None:
    """What ``v`` (a module or class attribute) contributes: plain values by repr, functions by code
    (their defaults and closures too), classes by their attributes, other callables by name."""
    if isinstance(v, _PLAIN):
        h.update(repr(v).encode())
    elif isinstance(v, types.FunctionType):
        h.update(f"f {v.__module__}.{v.__qualname__}".encode())
        _code(v.__code__, h)
        for d in (v.__defaults__ or ()) + tuple((v.__kwdefaults__ or {}).items()):
            _value(d, h, depth + 1) if depth < 3 else h.update(type(d).__qualname__.encode())
        for cell in v.__closure__ or ():
            try:
                c = cell.cell_contents
            except ValueError:  # an empty cell
                h.update(b"<empty>")
                continue
            _value(c, h, depth + 1) if depth < 3 else h.update(type(c).__qualname__.encode())
        wrapped = getattr(v, "__wrapped__", None)
        if wrapped is not None and depth < 3:
            _value(wrapped, h, depth + 1)
    elif isinstance(v, (staticmethod, classmethod)):
        h.update(type(v).__name__.encode())
        _value(v.__func__, h, depth + 1)
    elif isinstance(v, property):
        for f in (v.fget, v.fset, v.fdel):
            _value(f, h, depth + 1)
    elif isinstance(v, type) and v.__module__.startswith("mambalab") and depth < 3:
        h.update(f"c {v.__module__}.{v.__qualname__}".encode())
        for a in sorted(vars(v)):
            x = vars(v)[a]
            if isinstance(x, _PLAIN) or callable(x) or isinstance(x, (staticmethod, classmethod, property)):
                h.update(a.encode())
                _value(x, h, depth + 1)
    elif callable(v):
        h.update(f"x {getattr(v, '__module__', None)}.{getattr(v, '__qualname__', type(v).__qualname__)}"
                 .encode())
    else:
        h.update(b"?")


def module_fingerprint(mod) -> str:
    """A digest of ``mod``'s plain constants and callables (submodules and other objects left out, as in
    ``worker.cuda_graph._code_fingerprint``), the same in every process that loaded the same code."""
    h = hashlib.blake2b(digest_size=16)
    ns = vars(mod)
    for name in sorted(ns):
        v = ns[name]
        if isinstance(v, types.ModuleType) or not (isinstance(v, _PLAIN) or callable(v)):
            continue
        h.update(name.encode() + b"=")
        _value(v, h)
        h.update(b"\n")
    return h.hexdigest()


def code_fingerprint(names=None) -> dict[str, str]:
    """``{module name: module_fingerprint}`` for mambalab's loaded modules (or those of ``names`` loaded)."""
    if names is None:
        names = [n for n in sys.modules if n == "mambalab" or n.startswith("mambalab.")]
    return {n: module_fingerprint(sys.modules[n]) for n in sorted(names) if sys.modules.get(n) is not None}


def reference_modules() -> list[str]:
    """The mambalab modules whose Python code the reference runs (``greedy_ref`` and ``forward_ref`` of a
    model without a drafter, as the pool computes them), found by running it once under a profile hook;
    whatever it imports lazily is loaded by then."""
    from mambalab.model.tiny_hybrid import TinyHybridConfig, TinyHybridModel

    m = TinyHybridModel(TinyHybridConfig(seed=0))
    seen: set[str] = set()

    def hook(frame, event, arg):
        if event == "call":
            seen.add(frame.f_globals.get("__name__", ""))

    old = sys.getprofile()
    sys.setprofile(hook)
    try:
        ref = m.greedy_ref([1, 2, 3], 2)
        {k: v.clone() for k, v in m.forward_ref([1, 2, 3] + ref[:-1])[1].items()}
    finally:
        sys.setprofile(old)
    return sorted(n for n in seen if n == "mambalab" or n.startswith("mambalab."))


def serve(inbox, outbox) -> None:
    models: OrderedDict = OrderedDict()
    while True:
        try:
            msg = recv(inbox)
        except (EOFError, OSError):
            return
        if msg[0] == "model":
            _, key, blob = msg
            models[key] = pickle.loads(blob)
            while len(models) > MAX_MODELS:
                models.popitem(last=False)
        elif msg[0] == "job":
            _, job, key, prompt, n, with_state = msg
            model = models.get(key)
            if model is None:
                send(outbox, ("error", job, "unknown model"))
                continue
            models.move_to_end(key)
            try:
                ref = tuple(model.greedy_ref(list(prompt), n))
                state = None
                if ref and with_state:
                    state = {k: v.clone() for k, v in model.forward_ref(list(prompt) + list(ref[:-1]))[1].items()}
                send(outbox, ("done", job, ref, state))
            except Exception as e:  # noqa: BLE001 - the caller computes it itself
                send(outbox, ("error", job, f"{type(e).__name__}: {e}"))
        elif msg[0] == "exit":
            return


def main(argv: list[str]) -> int:
    import os

    if len(argv) < 4 or argv[3] == "idle":  # (reference_pool.START_IDLE): a busy machine gives the caller's
        enter_idle_class()  # engine the core first, this start-up included
    inbox, outbox = connections(argv)

    import torch

    torch.set_num_threads(int(argv[2]))
    fingerprint = code_fingerprint(reference_modules())
    leave_idle_class()
    try:
        send(outbox, ("ready", os.getpid(), fingerprint, torch.get_num_threads()))
        serve(inbox, outbox)
    except (BrokenPipeError, EOFError, OSError):  # the caller exited or closed its end: nothing to answer
        pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
