"""mambalab: vLLM's hybrid-model state management, its bugs and their fixes.

The device module is imported first: it decides CUDA or the CPU interpreter
and sets ``TRITON_INTERPRET`` before any kernel is defined.
"""

from mambalab import device  # noqa: F401  (must stay first)
from mambalab.lab.bugs import BUGS, CATALOGUE, BugConfig
from mambalab.constants import NULL_BLOCK_ID, PAD_SLOT_ID
from mambalab.device import DEVICE

__version__ = "0.1.0"

__all__ = ["BUGS", "CATALOGUE", "BugConfig", "DEVICE", "NULL_BLOCK_ID", "PAD_SLOT_ID"]
