"""Planting a new bug: swap one function of the fixed engine for a variant, for the hunter's runs.

The catalogue's bugs are switches that the library knows about. A learner
who wants to see whether the differential hunter would catch a bug *nobody
has catalogued yet* writes the tempting variant of one small function and
plants it: :class:`Plant` is a context manager that replaces an attribute
(a function or method of the library) while it is active and restores it after.
:func:`mambalab.lab.hunt.hunt` runs its bug runs under the plant and its
control runs (the fixed engine) without it, so a failure is attributed to
the planted variant only when the untouched engine passes the same workload.

:func:`plant_padded_tail` is the guided example of notebook 05: the padded
rows of the device block table (rows past the live requests of a padded
CUDA-graph batch) are where #35431 put ``-1`` and where the fixed
runner (``_build_attention_metadata``) puts the null block.
A plausible-looking alternative, "give the padded rows a real slot so the
kernels have no special case", is the planted bug.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from mambalab.attention import metadata


@dataclass
class Plant:
    """Replace ``owner.attribute`` by ``replacement`` while active (``with plant: ...``)."""

    name: str
    description: str
    owner: Any
    attribute: str
    replacement: Any
    _saved: list = field(default_factory=list, repr=False)

    def __enter__(self) -> "Plant":
        self._saved.append(getattr(self.owner, self.attribute))
        setattr(self.owner, self.attribute, self.replacement)
        return self

    def __exit__(self, *exc) -> None:
        setattr(self.owner, self.attribute, self._saved.pop())

    def __str__(self) -> str:
        return f"planted bug {self.name!r} ({self.description})"


def repeat_last_live(slots: list[int], num_reqs: int) -> list[int]:
    """The guided planted bug: padded entries repeat the last live row's slot (the null block if none)."""
    fill = slots[num_reqs - 1] if num_reqs > 0 else 0
    return list(slots[:num_reqs]) + [fill] * (len(slots) - num_reqs)


def plant_padded_tail(pad_tail: Callable[[list[int], int], Sequence[int]], *, name: str = "padded-tail") -> Plant:
    """Plant ``pad_tail(slots, num_reqs) -> slots`` as the runner's fill of the padded rows.

    ``slots`` is one column of the device block table over the padded batch
    (live rows first, then the padded rows with whatever they held); the
    function returns the whole column with the padded entries (index
    ``>= num_reqs``) filled. The fixed runner
    (:func:`mambalab.attention.metadata.fill_padded_rows`, ``_build_attention_metadata``
    in ``vllm/v1/worker/gpu_model_runner.py``) fills them with
    ``NULL_BLOCK_ID``. Every column is filled alike.
    """

    def fill_padded_rows(block_table: torch.Tensor, num_reqs: int, pad_value: int) -> None:
        for c in range(block_table.shape[1]):
            col = block_table[:, c]
            old = [int(x) for x in col.tolist()]
            new = [int(x) for x in pad_tail(list(old), num_reqs)]
            if len(new) != len(old) or new[:num_reqs] != old[:num_reqs]:
                raise ValueError(f"{name}: pad_tail must return all {len(old)} entries with the first "
                                 f"{num_reqs} (the live rows) unchanged, got {new} for {old}")
            col.copy_(torch.tensor(new, dtype=col.dtype))

    return Plant(name, "padded block-table rows filled by pad_tail instead of the null block",
                 metadata, "fill_padded_rows", fill_padded_rows)


__all__ = ["Plant", "plant_padded_tail", "repeat_last_live"]
