"""Every request's recurrent memory: :class:`ModelState`, four pools (Mamba conv, Mamba SSM, GDN
conv, GDN recurrent) indexed by block id, block 0 the null block. The miniature of the Mamba
KV-cache group's tensors (``MambaSpec`` in ``vllm/v1/kv_cache_interface.py``, allocated by the
GPU model runner); :func:`zero_state` is a request that has seen no token. Each pool is allocated
behind one guard slot of its own (``mambalab/guard_band.py``: the workbook's, not vLLM's)."""

from __future__ import annotations

import torch

from mambalab.device import DEVICE
from mambalab.guard_band import GUARD_CANARY, GUARD_SLOTS, GuardSlotWritten, behind_band
from mambalab.kernels.causal_conv1d import make_conv_state
from mambalab.model.config import TinyHybridConfig

STATE_KEYS: tuple[str, ...] = ("mamba_conv", "mamba_ssm", "gdn_conv", "gdn_recurrent")


class ModelState:
    """The per-layer state pools, indexed by block id (slot); block 0 is the null block.

    Mirrors the Mamba KV-cache group's tensors (``MambaSpec`` in
    ``vllm/v1/kv_cache_interface.py``; one block holds one request's conv and
    SSM state of every Mamba-like layer). Conv pools are stored
    dim-contiguous (:func:`~mambalab.kernels.causal_conv1d.make_conv_state`),
    the GDN pool ``[slots, HV, V, K]``. Everything starts as zeros.

    ``guards``: each pool's guard slot (slot ``-1`` of its storage, owned by the pool),
    :meth:`allocate`'s; :meth:`guards_written` says which a kernel stored to.
    """

    def __init__(self, cfg: TinyHybridConfig, pools: dict[str, torch.Tensor],
                 guards: dict[str, torch.Tensor] | None = None) -> None:
        if set(pools) != set(STATE_KEYS):
            raise ValueError(f"pools must have the keys {STATE_KEYS}, got {sorted(pools)}")
        self.cfg = cfg
        self.pools = pools
        self.guards = guards or {}
        self.num_blocks = next(iter(pools.values())).shape[0]

    @classmethod
    def allocate(
        cls,
        cfg: TinyHybridConfig,
        num_blocks: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> "ModelState":
        """Zeroed pools of ``num_blocks`` slots (block 0 included), each behind its guard slot
        (filled with ``GUARD_CANARY``)."""
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1 (block 0 is the null block), got {num_blocks}")
        device = DEVICE if device is None else torch.device(device)
        shapes = cfg.state_shapes()
        n = num_blocks + GUARD_SLOTS
        full = {
            "mamba_conv": make_conv_state(n, *shapes["mamba_conv"], dtype=dtype, device=device),
            "mamba_ssm": torch.zeros((n, *shapes["mamba_ssm"]), dtype=dtype, device=device),
            "gdn_conv": make_conv_state(n, *shapes["gdn_conv"], dtype=dtype, device=device),
            "gdn_recurrent": torch.zeros((n, *shapes["gdn_recurrent"]), dtype=dtype, device=device),
        }
        banded = {k: behind_band(t, GUARD_CANARY) for k, t in full.items()}
        return cls(cfg, {k: v for k, (v, _) in banded.items()}, {k: g for k, (_, g) in banded.items()})

    def guards_written(self) -> list[str]:
        """The pools whose guard slot no longer holds ``GUARD_CANARY``: a kernel stored one slot
        before them (``pad-minus-one``'s ``-1`` on a GPU, or on the CPU with the sanitizer off).
        One device synchronisation for all of them."""
        if not self.guards:
            return []
        changed = torch.stack([(g != GUARD_CANARY).any() for g in self.guards.values()]).tolist()
        return [k for k, c in zip(self.guards, changed) if c]

    def check_guards(self, step: int | None = None) -> None:
        """Raise :class:`~mambalab.guard_band.GuardSlotWritten` if a kernel stored one slot before a
        pool (``step``: the engine step that ran the kernels; None: the start-up captures)."""
        written = self.guards_written()
        if written:
            raise GuardSlotWritten(written, step)

    # -- convenient attribute access ----------------------------------------
    @property
    def mamba_conv(self) -> torch.Tensor:
        return self.pools["mamba_conv"]

    @property
    def mamba_ssm(self) -> torch.Tensor:
        return self.pools["mamba_ssm"]

    @property
    def gdn_conv(self) -> torch.Tensor:
        return self.pools["gdn_conv"]

    @property
    def gdn_recurrent(self) -> torch.Tensor:
        return self.pools["gdn_recurrent"]

    @property
    def dtype(self) -> torch.dtype:
        return self.pools["mamba_ssm"].dtype

    @property
    def device(self) -> torch.device:
        return self.pools["mamba_ssm"].device

    # -- slot helpers (host side, for the engine and the tests) -------------
    def _check(self, slot: int) -> int:
        slot = int(slot)
        if not 0 <= slot < self.num_blocks:
            raise IndexError(f"slot {slot} is outside the pool [0, {self.num_blocks})")
        return slot

    def read_slot(self, slot: int) -> dict[str, torch.Tensor]:
        """A copy of every state in ``slot`` (contiguous, the pool's dtype)."""
        slot = self._check(slot)
        return {k: p[slot].clone(memory_format=torch.contiguous_format) for k, p in self.pools.items()}

    def write_slot(self, slot: int, state: dict[str, torch.Tensor]) -> None:
        """Copy ``state`` (all four keys) into ``slot``."""
        slot = self._check(slot)
        if set(state) != set(STATE_KEYS):
            raise ValueError(f"state must have the keys {STATE_KEYS}, got {sorted(state)}")
        for k, p in self.pools.items():
            p[slot].copy_(state[k])

    def copy_slot(self, src: int, dst: int) -> None:
        """Copy every state of slot ``src`` into slot ``dst``."""
        src, dst = self._check(src), self._check(dst)
        for p in self.pools.values():
            p[dst].copy_(p[src])

    def poison_slot(self, slot: int) -> None:
        """Fill ``slot`` with NaN: a freed block, so that a stale read shows."""
        slot = self._check(slot)
        for p in self.pools.values():
            p[slot].fill_(float("nan"))

    def zero_slot(self, slot: int) -> None:
        slot = self._check(slot)
        for p in self.pools.values():
            p[slot].zero_()

    def snapshot(self) -> dict[str, torch.Tensor]:
        """A copy of every whole pool (for bit-identity checks)."""
        return {k: p.clone() for k, p in self.pools.items()}

    def slot_is_zero(self, slot: int) -> bool:
        """True when every state of ``slot`` is exactly zero (the null block's invariant)."""
        slot = self._check(slot)
        return all(bool((p[slot] == 0).all()) for p in self.pools.values())


def zero_state(cfg: TinyHybridConfig, device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
    """The state of a request that has seen no token (float32)."""
    device = DEVICE if device is None else torch.device(device)
    return {k: torch.zeros(s, dtype=torch.float32, device=device) for k, s in cfg.state_shapes().items()}
