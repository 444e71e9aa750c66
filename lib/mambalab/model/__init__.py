"""The tiny hybrid model and the speculative drafter (vllm/model_executor/models/, vllm/v1/spec_decode/ in miniature).

* ``tiny_hybrid.py``: :class:`~mambalab.model.tiny_hybrid.TinyHybridModel`, one Mamba2 and one
  gated-delta-net mixer stacked (``qwen3_next.py``); everything below is importable from it;
* ``config.py``: its sizes (:class:`~mambalab.model.config.TinyHybridConfig`);
* ``state.py``: the state pools indexed by block id (:class:`~mambalab.model.state.ModelState`);
* ``mamba_mixer2.py``: the Mamba2 mixer (``layers/mamba/mamba_mixer2.py``);
* ``gated_delta_net.py``: the gated-delta-net mixer (``Qwen3NextGatedDeltaNet``);
* ``decode_slots.py``: the slots each row of a decode step reads and writes, shared by both mixers;
* ``layers.py``: RMSNorm and the seeded weight draws;
* ``drafter.py``: the deterministic draft proposer (``vllm/v1/spec_decode/``).
"""
