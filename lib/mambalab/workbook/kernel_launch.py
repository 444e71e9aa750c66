"""One kernel launch on its own over a small pool, recorded by the sanitizer, with the report and
the access map of that one launch: Mamba2's decode kernel (``selective_state_update``:
:func:`launch_ssu`, a ``-1`` or a ``0`` in the padded rows) and the gated-delta-rule decode kernel
(``fused_recurrent_gated_delta_rule``: :func:`launch_gdn`, FLA's ``<= 0`` guard and the ``< 0``
guard of #39064's pre-fix world). Each kernel family keeps its own guard, as upstream
(:meth:`BugConfig.kernel_guard_for`)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from typing import Sequence

import torch

from mambalab.constants import NULL_BLOCK_ID
from mambalab.device import DEVICE_TYPE, INTERPRET
from mambalab.lab import sanitizer
from mambalab.lab.bugs import BugConfig, KernelFamily
from mambalab.lab.worker_process import child_env
from mambalab.viz.text import Text


@dataclass
class KernelRun:
    """One sanitized decode-kernel launch over a small pool (what :func:`launch_ssu` and
    :func:`launch_gdn` return)."""

    indices: list[int]
    bugs: BugConfig
    before: torch.Tensor  # the pool before the launch
    state: torch.Tensor  # the pool after it
    reference: torch.Tensor  # the fixed pure-torch reference on a copy of ``before``
    log: sanitizer.AccessLog
    error: sanitizer.IllegalMemoryAccess | None
    owners: dict[int, str]
    index_name: str = "state_batch_indices"  # the kernel's argument that holds the rows' slots
    family: KernelFamily = KernelFamily.MAMBA

    @property
    def num_slots(self) -> int:
        return int(self.state.shape[0])

    def report(self) -> Text:
        """The launch in a few lines: indices, guard, and the sanitizer's verdict."""
        guard = self.bugs.kernel_guard_for(self.family).name
        lines = [f"{self.index_name} = {self.indices}   ({self.bugs}, kernel guard {guard})"]
        if self.error is not None:
            e = self.error
            lines.append(f"IllegalMemoryAccess in '{e.kernel}': {e.total} invalid accesses; the first: "
                         + e.violations[0].describe())
        else:
            lines.append("no illegal access")
        null = "zero" if bool((self.state[NULL_BLOCK_ID] == 0).all()) else "NOT zero"
        lines.append(f"null block {NULL_BLOCK_ID} after the launch: {null}")
        return Text("\n".join(textwrap.fill(x, 110, subsequent_indent="    ") for x in lines))

    def draw_access_map(self, **kw):
        from mambalab import viz

        return viz.draw_access_map(self.log, num_slots=self.num_slots, **kw)

    def draw_state_pool(self, **kw):
        from mambalab import viz

        kw.setdefault("reference", self.reference)
        return viz.draw_state_pool(self.state, reads=self.log.slots("state", "load"),
                                   writes=self.log.slots("state", "store"), owners=self.owners, **kw)


def _launch(indices: Sequence[int], bugs: BugConfig | None, seed: int, make, run, ref, **fields) -> KernelRun:
    """What every one-launch demo shares (a negative index on a GPU never gets here: the callers send it to
    :func:`on_the_interpreter`): draw the pool and the activations (``make(randn, rows)`` returns both; the
    null block is zeroed), launch ``run`` under the sanitizer (an illegal access caught, not raised) and the
    fixed reference ``ref`` on a copy of the pool."""
    bugs = bugs if bugs is not None else BugConfig()
    g = torch.Generator().manual_seed(seed)
    state, kw = make(lambda *shape: torch.randn(*shape, generator=g), len(indices))
    state[NULL_BLOCK_ID] = 0
    dev = torch.device("cpu") if INTERPRET else torch.device(DEVICE_TYPE)
    state = state.to(dev)
    kw = {k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    before = state.clone()
    reference = state.clone()
    idx = torch.tensor(list(indices), dtype=torch.int32, device=dev)
    error = None
    with sanitizer.recording() as log:
        try:
            run(state, idx, bugs, kw)
        except sanitizer.IllegalMemoryAccess as e:
            error = e
    ref(reference, idx.clamp(min=0), kw)
    owners = {int(v): f"r{i}" for i, v in enumerate(indices) if int(v) > NULL_BLOCK_ID}
    return KernelRun(list(int(i) for i in indices), bugs, before.cpu(), state.cpu(), reference.cpu(), log, error,
                     owners, **fields)


def launch_ssu(indices: Sequence[int], bugs: BugConfig | None = None, *, slots: int = 8, seed: int = 0) -> KernelRun:
    """Mamba2's decode kernel on ``len(indices)`` rows of a ``slots``-slot pool, recorded by the sanitizer.

    Rows with a positive index are live requests (named r0, r1, ... in row
    order); the pool's other slots hold random state, the null block holds
    zeros. An illegal access is caught (``KernelRun.error``), not raised.
    On a GPU a wild index is a real fault, which would end the process (a
    Jupyter kernel with it): there a launch with a negative index runs on the
    CPU interpreter in a helper process (:func:`on_the_interpreter`), so its
    report is the sanitizer's, as on a laptop.

    One program per (row, head), as vLLM's launch and the lab's on a GPU (the
    engine's interpreter launch stacks a row's heads in one program for speed),
    so the programs and addresses shown are the ones a GPU runs.
    """
    if _needs_interpreter(indices):
        return on_the_interpreter("launch_ssu", indices, bugs, slots=slots, seed=seed)
    from mambalab.kernels.mamba_ssm import LaunchConfig, launch_config_override, selective_state_update
    from mambalab.kernels.mamba_ssm_ref import selective_state_update_ref

    H, P, N = 2, 4, 4

    def make(r, n):
        state = r(slots, H, P, N)
        return state, dict(x=r(n, H, P), dt=r(n, H, P) * 0.5, A=-(r(H, P, N).abs() + 0.5), B=r(n, 1, N),
                           C=r(n, 1, N), D=r(H, P), dt_bias=r(H, P) * 0.3, z=r(n, H, P), dt_softplus=True)

    def run(state, idx, b, kw):
        with launch_config_override(LaunchConfig(block_m=P, num_warps=4, block_h=1)):
            selective_state_update(state, state_batch_indices=idx, bugs=b, **kw)

    return _launch(indices, bugs, seed, make, run,
                   lambda state, idx, kw: selective_state_update_ref(state, state_batch_indices=idx, **kw))


def launch_gdn(indices: Sequence[int], bugs: BugConfig | None = None, *, slots: int = 8, seed: int = 0) -> KernelRun:
    """The gated-delta-rule decode kernel (FLA's ``fused_recurrent``) on ``len(indices)`` rows of a
    ``slots``-slot pool, one token each, recorded by the sanitizer; as :func:`launch_ssu` otherwise.

    Its guard is FLA's: ``<= 0`` is skipped (fixed), only ``< 0`` under ``guard-lt-zero`` (#39064's
    pre-fix world: padded rows load the null block and store into it). One program per (row, value
    head), as FLA's launch.
    """
    if _needs_interpreter(indices):
        return on_the_interpreter("launch_gdn", indices, bugs, slots=slots, seed=seed)
    from mambalab.kernels.gated_delta_rule import fused_recurrent_gated_delta_rule
    from mambalab.kernels.gated_delta_rule_ref import fused_recurrent_gated_delta_rule_ref

    H, K, V = 2, 4, 4

    def make(r, n):
        state = r(slots, H, V, K)
        return state, dict(q=r(n, 1, H, K), k=r(n, 1, H, K), v=r(n, 1, H, V), g=-r(n, 1, H).abs() * 0.5,
                           beta=torch.sigmoid(r(n, 1, H)), use_qk_l2norm_in_kernel=True)

    return _launch(indices, bugs, seed, make,
                   lambda state, idx, b, kw: fused_recurrent_gated_delta_rule(
                       initial_state=state, ssm_state_indices=idx, bugs=b, block_h=1, **kw),
                   lambda state, idx, kw: fused_recurrent_gated_delta_rule_ref(
                       initial_state=state, ssm_state_indices=idx, **kw),
                   index_name="ssm_state_indices", family=KernelFamily.FLA)


def _needs_interpreter(indices: Sequence[int]) -> bool:
    return not INTERPRET and any(int(i) < 0 for i in indices)


def on_the_interpreter(fn: str, indices: Sequence[int], bugs: BugConfig | None = None, **kw) -> KernelRun:
    """``fn`` (:func:`launch_ssu` or :func:`launch_gdn`) run in a helper process on Triton's CPU
    interpreter (``MAMBALAB_DEVICE=cpu``) and its :class:`KernelRun` returned: the same kernel
    source, under the sanitizer, whatever this process's device. A GPU machine's way to show a
    negative index's illegal access without making it."""
    if fn not in ("launch_ssu", "launch_gdn"):
        raise ValueError(f"on_the_interpreter runs launch_ssu or launch_gdn, not {fn!r}")
    code = ("import pickle, sys\n"
            "from mambalab.workbook import kernel_launch as k\n"
            "fn, indices, bugs, kw = pickle.load(open(sys.argv[1], 'rb'))\n"
            "run = getattr(k, fn)(indices, bugs, **kw)\n"
            "pickle.dump(run, open(sys.argv[1], 'wb'))\n")
    env = child_env(MAMBALAB_DEVICE="cpu")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "launch.pkl")
        with open(path, "wb") as f:
            pickle.dump((fn, [int(i) for i in indices], bugs, kw), f)
        r = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, env=env,
                           timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"{fn} on the CPU interpreter failed (exit {r.returncode}): {r.stderr[-2000:]}")
        with open(path, "rb") as f:
            return pickle.load(f)
