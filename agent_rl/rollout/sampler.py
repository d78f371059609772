"""The rollout's sampler API: the one sampler of `agent_rl.models.sampler`, re-exported.

The implementation (temperature / top-k / top-p / greedy inverse-CDF draw, behaviour and
sample log-probs, the `while_loop` token decode loop over an explicit KV cache) lives in
`agent_rl/models/sampler.py`; its docstring says why that room is the home (rollout imports
models, never the reverse). This module keeps the rollout's import path
(`EpisodeConfig(sampler=SamplerConfig(...))`) and its name for the decode loop, `generate`,
which `EpisodeLoop.act` calls with `(decode, logits, cache, positions, active, keys, cfg,
pad_id) -> (Generation, cache)`; it is the same object as `models.sampler.decode_loop`.
"""
from agent_rl.models.sampler import Generation, SamplerConfig, decode_loop, sample, sampling_logprobs

generate = decode_loop

__all__ = ["Generation", "SamplerConfig", "decode_loop", "generate", "sample",
           "sampling_logprobs"]
