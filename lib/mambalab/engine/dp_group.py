"""The process groups of one DP rank: a CPU group for control, a device group for the batch.

Mirrors the two groups vLLM keeps per parallel group (``vllm/distributed/parallel_state.py``,
``GroupCoordinator.cpu_group`` and ``.device_group``) as the DP engine core uses them:
``_has_global_unfinished_reqs`` all-reduces a flag over the CPU group (gloo), and
``coordinate_batch_across_dp`` (``vllm/v1/worker/dp_utils.py``) all-reduces the token
counts over the device group: NCCL on GPUs. On the CPU both are gloo.

A collective that fails is classified where it fails: if this process's CUDA context is
broken (a kernel faulted: the error is sticky), this rank is the origin
(:class:`CudaFault`); otherwise a peer is most likely gone (:class:`PeerLost`), and the
launcher reports that peer's own error instead.
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist

from mambalab.worker.cudagraph_dispatcher import CUDAGRAPH_MODE_ORDER, CUDAGraphMode


def backend_for(device_type: str) -> str:
    """The ``torch.distributed`` backend of the device group: NCCL on GPUs, gloo on the CPU."""
    if device_type not in ("cpu", "cuda"):
        raise ValueError(f"device {device_type!r}: expected 'cpu' or 'cuda'")
    return "nccl" if device_type == "cuda" else "gloo"


class PeerLost(RuntimeError):
    """A collective failed: most likely a peer died (the peer's own error is the cause)."""


class CudaFault(RuntimeError):
    """This rank's CUDA context is broken (a kernel faulted): the rank cannot go on."""


def cuda_broken() -> str | None:
    """The sticky CUDA error of this process, if its context is gone (None on the CPU, or while
    CUDA still works): a synchronisation and a tiny kernel either succeed or raise that error."""
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    try:
        torch.cuda.synchronize()
        torch.zeros(1, device="cuda").add_(1).item()
    except Exception as e:  # noqa: BLE001 - the sticky error: every CUDA call now fails with it
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None


class DPGroup:
    """The collectives of one DP rank. ``cpu_group`` (gloo) carries the control flags and pickled
    objects; ``device_group`` (NCCL on GPUs, the same gloo group on the CPU) carries the batch
    all-reduce of ``coordinate_batch_across_dp``, on tensors that live on ``device``. ``None``
    is the default group."""

    def __init__(self, device: torch.device, cpu_group=None, device_group=None):
        self.device = device
        self.cpu_group = cpu_group
        self.device_group = device_group

    def _collective(self, what: str, fn):
        try:
            return fn()
        except Exception as e:  # noqa: BLE001
            broken = cuda_broken() if self.device.type == "cuda" else None
            if broken:  # our own context is gone: we are the origin, not the victim
                raise CudaFault(f"{what} failed on {self.device}: {broken}") from e
            raise PeerLost(f"{what} failed (a peer is gone?): {type(e).__name__}: {e}") from e

    def control(self, has_work: bool, crashed: bool) -> tuple[bool, bool]:
        """MAX over ranks of (has unfinished work, crashed): ``_has_global_unfinished_reqs``."""
        t = torch.tensor([int(has_work), int(crashed)])
        self._collective("all_reduce (control)",
                         lambda: dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.cpu_group))
        return bool(t[0]), bool(t[1])

    def coordinate_batch(self, local_tokens: int, local_mode: CUDAGraphMode) -> tuple[int, CUDAGraphMode]:
        """One all-reduce on the device group for both of ``coordinate_batch_across_dp``'s answers:
        the MAX of the scheduled token counts and the MIN of the ranks' CUDA-graph modes
        (``_post_process_cudagraph_mode``), packed as MAX over ``(tokens, -mode)``."""
        order = CUDAGRAPH_MODE_ORDER
        t = torch.tensor([local_tokens, -order.index(local_mode)], dtype=torch.int64, device=self.device)

        def reduce() -> tuple[int, CUDAGraphMode]:
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.device_group)
            tokens, neg_mode = t.tolist()  # waits for the collective (NCCL runs it on the GPU's stream)
            return int(tokens), order[-int(neg_mode)]

        return self._collective("all_reduce (num_tokens_across_dp, cudagraph_mode)", reduce)

    def all_gather_object(self, obj) -> list:
        out = [None] * dist.get_world_size()
        self._collective("all_gather_object", lambda: dist.all_gather_object(out, obj, group=self.cpu_group))
        return out

    def gather_object(self, obj, rank: int) -> list | None:
        out = [None] * dist.get_world_size() if rank == 0 else None
        self._collective("gather_object", lambda: dist.gather_object(obj, out, dst=0, group=self.cpu_group))
        return out


def init_groups(device_type: str, rank: int, world: int, device: torch.device, timeout_s: float,
                collective_timeout_s: float) -> DPGroup:
    """Join the ``env://`` rendezvous (MASTER_ADDR, MASTER_PORT; ``rank`` of ``world``).

    GPUs: the default group is NCCL, bound to ``device`` (``device_id``: the communicator is
    made now, not at the first collective), with ``collective_timeout_s`` after which NCCL's
    watchdog tears the process down (``TORCH_NCCL_ASYNC_ERROR_HANDLING``); a gloo group beside
    it. CPU: the default group and the group beside it are both gloo."""
    if backend_for(device_type) == "nccl":
        dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=world,
                                timeout=timedelta(seconds=collective_timeout_s), device_id=device)
        cpu_group = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))
        return DPGroup(device, cpu_group, None)
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world,
                            timeout=timedelta(seconds=timeout_s))
    # a second gloo group for control and objects, as on GPUs: the CPU runs the same code paths
    return DPGroup(device, dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s)), None)


__all__ = ["CudaFault", "DPGroup", "PeerLost", "backend_for", "cuda_broken", "init_groups"]
