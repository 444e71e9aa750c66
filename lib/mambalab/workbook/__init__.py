"""Helpers the workbook's notebooks call, so that every cell stays one or two lines.

The notebooks (``notebooks/*.ipynb``) are checked by nbval in strict mode:
every stored output is compared with a fresh run. So everything here prints
short, deterministic text and never anything that changes between runs
(addresses, timings, object ids). ``from mambalab import workbook as wb``
gives all of it; one concept per file:

* ``display.py``: :func:`setup` (seeds, and a one-line description of where
  kernels run); :func:`show` (a drawing as PNG with a ``text/plain`` line
  naming what the drawing found, its title: nbval skips PNGs but compares
  that line); :func:`figure_title`; :func:`pr_link`;
* ``summary.py``: :func:`summary_of`, a
  :class:`~mambalab.lab.scenarios.ReplayResult` (or a :class:`Trace`) in a
  few lines: exit code, verdict, mechanisms (repeated per-step sentences
  folded into step ranges by :func:`fold_steps`);
* ``tracer.py``: :func:`trace`, a bug's scenario (or any workload) run step
  by step with snapshots of the steps asked for: block table, metadata,
  state pool and the kernels' accesses, for drawing after the run. Its
  verdict is the one :func:`~mambalab.lab.scenarios.replay` gives (same
  workload, same judge);
* ``step_trace.py``: what :func:`trace` returns, :class:`Trace` (the verdict
  plus the snapshots, as text and drawings) and its snapshots
  (:class:`Snapshot`);
* ``blocks.py``: whose a block is, as the traces and the world print it;
* ``mini_world.py``: :class:`MiniWorld`, a block pool, an input batch, the
  runner buffers and a Mamba metadata builder, with no model: the
  bookkeeping alone, driven by hand (add, finish, condense, step, dummy
  run); :func:`idle_rank` walks one into #37728;
* ``kernel_launch.py``: :func:`launch_ssu` / :func:`launch_gdn`, one sanitized Mamba2 / GDN
  decode-kernel launch over a small pool (a ``-1``, a ``0``, the ``< 0``
  guard), caught and recorded as a :class:`KernelRun`;
* ``tour.py``: the tour's workload (:func:`tour_workload`) and what one
  request's state is made of (:func:`state_table`);
* ``graph_demo.py``: :func:`cuda_graph_demo`, the CUDA-graph contract in ten
  lines (static buffer, capture, ``copy_``, a replay over a stale buffer);
* ``folded.py``: :func:`fold`, a long text output as its summary, the full
  text in a closed ``<details>`` (short ``text/plain``);
* ``excerpts.py``: :func:`source_excerpt`, :func:`expect_error`;
* ``exercises.py``: the :data:`EXERCISES` and their random cases (ground
  truth computed with the library, never with the solution);
* ``checker.py``: :func:`check` and :func:`reveal` (the exercises' checker,
  the expected value of a miss on request, and the solution printer, a
  :class:`Solution`);
* ``fix_it.py``: :func:`check_fix` and :func:`reveal_fix`, the fix-it
  exercises: the learner's function planted where a fix went in the
  engine, judged by the bug's scenario;
* ``predict.py``: :func:`predict`, the predict-then-step questions (truths
  from the library);
* ``bug_hunt.py``: notebook 05's :func:`plant_pad_tail`,
  :func:`hunt_report` and :func:`workload_steps`.

The workbook may use :mod:`mambalab.gpu.gpu_report` (the GPU chapter's
exercise cases); nothing under :mod:`mambalab.gpu` imports the workbook.
"""

from mambalab.viz.text import Text
from mambalab.workbook.display import figure_title, pr_link, setup, show
from mambalab.workbook.summary import fold_steps, summary_of
from mambalab.workbook.step_trace import Snapshot, Trace
from mambalab.workbook.tracer import trace
from mambalab.workbook.kernel_launch import KernelRun, launch_gdn, launch_ssu
from mambalab.workbook.mini_world import MiniWorld, idle_rank
from mambalab.workbook.tour import state_table, tour_workload
from mambalab.workbook.excerpts import expect_error, source_excerpt
from mambalab.workbook.graph_demo import cuda_graph_demo
from mambalab.workbook.folded import Folded, fold
from mambalab.workbook.exercises import EXERCISES
from mambalab.workbook.checker import Solution, check, reveal
from mambalab.workbook.fix_it import check_fix, reveal_fix
from mambalab.workbook.predict import predict
from mambalab.workbook.bug_hunt import hunt_report, plant_pad_tail, workload_steps

__all__ = [
    "Text",
    "setup",
    "show",
    "figure_title",
    "summary_of",
    "fold_steps",
    "trace",
    "Trace",
    "Snapshot",
    "MiniWorld",
    "KernelRun",
    "launch_gdn",
    "launch_ssu",
    "idle_rank",
    "tour_workload",
    "state_table",
    "source_excerpt",
    "cuda_graph_demo",
    "fold",
    "Folded",
    "expect_error",
    "EXERCISES",
    "check",
    "reveal",
    "Solution",
    "check_fix",
    "reveal_fix",
    "predict",
    "hunt_report",
    "plant_pad_tail",
    "workload_steps",
    "pr_link",
]
