"""mambalab: vLLM's hybrid-model state management, its bugs and their fixes.

The device module is imported first: it decides CUDA or the CPU interpreter
and sets ``TRITON_INTERPRET`` before any kernel is defined.
"""

from . import device  # noqa: F401  (must stay first)
from .bugs import BUGS, CATALOGUE, BugConfig
from .constants import NULL_BLOCK_ID, PAD_SLOT_ID
from .device import DEVICE

__version__ = "0.1.0"

__all__ = ["BUGS", "CATALOGUE", "BugConfig", "DEVICE", "NULL_BLOCK_ID", "PAD_SLOT_ID"]
