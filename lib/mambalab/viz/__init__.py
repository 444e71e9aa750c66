"""Pictures of hybrid-model state, so that a learner sees a bug before reading about it.

One module per drawing; each ``draw_*`` returns a ``matplotlib.figure.Figure``
(built without pyplot: shown once in a notebook, never left open) and takes
``ax=`` or ``fig=`` to redraw in place for a widget. Each has a headless
``describe_*`` that returns the findings as sentences, most severe first: the
drawing's title is the first of them.

* :func:`draw_block_table`: CPU mirror | device copy of a block table; ``-1``,
  stale rows, padded rows, uncommitted rows (#35431, #37728).
* :func:`draw_state_pool`: one cell per slot with its readers and writers
  and a colour bar; the null block written by padded rows (#39064),
  NaN-poisoned slots read; before → after a step, and stores by a row into
  a slot it does not own.
* :func:`draw_metadata`: per-row lengths, ``is_prefilling``, the Mamba split,
  the decode state slots and the CUDA-graph buffer refresh (#41873, #41233).
* :func:`draw_access_map`: rows × slots loaded and stored by a sanitized
  kernel launch; illegal slots in a column outside the pool.
* :func:`draw_timeline`: engine tokens against the reference, first
  divergence per request, and the batch of each step.
* :func:`draw_pipeline`: one decode step from scheduler to kernel, each
  stage named with its vLLM file (notebook 00).
* :func:`draw_spec_columns`: one request's block-table row under "all" +
  speculative decoding: gather window, start column, writes (#41233).

Colours are Okabe–Ito (colour-blind safe) and every problem also has a hatch
or a frame, so nothing depends on colour alone. Each legend entry has one
meaning; a title carries one finding (the most severe) and says how many
more problems there are.
"""

from mambalab.viz._common import PALETTE, Finding, VizFigure, figure_to_array, figure_to_png
from mambalab.viz.access_map import analyse_access_map, describe_access_map, draw_access_map
from mambalab.viz.block_table import BlockTableView, analyse_block_table, describe_block_table, draw_block_table
from mambalab.viz.metadata import analyse_metadata, describe_metadata, draw_metadata
from mambalab.viz.state_pool import analyse_state_pool, describe_state_pool, draw_state_pool, slot_summary
from mambalab.viz.timeline import analyse_timeline, describe_timeline, draw_timeline, first_divergence
from mambalab.viz.pipeline import draw_pipeline, pipeline_stages
from mambalab.viz.spec_columns import analyse_spec_columns, describe_spec_columns, draw_spec_columns
from mambalab.viz.text import Text

__all__ = [
    "PALETTE",
    "Finding",
    "VizFigure",
    "BlockTableView",
    "figure_to_png",
    "figure_to_array",
    "draw_block_table",
    "describe_block_table",
    "analyse_block_table",
    "draw_state_pool",
    "describe_state_pool",
    "analyse_state_pool",
    "slot_summary",
    "draw_metadata",
    "describe_metadata",
    "analyse_metadata",
    "draw_access_map",
    "describe_access_map",
    "analyse_access_map",
    "draw_timeline",
    "describe_timeline",
    "analyse_timeline",
    "first_divergence",
    "draw_pipeline",
    "pipeline_stages",
    "draw_spec_columns",
    "describe_spec_columns",
    "analyse_spec_columns",
]
