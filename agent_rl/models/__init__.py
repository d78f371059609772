"""agent_rl.models: the policy language model room.

Decoder transformer (Qwen2/Qwen2.5, Llama-3, Qwen3, Gemma 3) in Flax NNX with logical axis
names, presets, a functional inference API over `(graphdef, state)` with an explicit KV cache,
value/reward heads, log-prob helpers, LoRA adapters, Hugging Face safetensors import / export
and a small jitted sampler.
"""
from agent_rl.models.cache import KVCache, init_cache
from agent_rl.models.config import ModelConfig, RopeScaling
from agent_rl.models.generate import generate
from agent_rl.models.heads import RewardHead, ValueHead
from agent_rl.models.hf_import import FAMILIES, load_hf
from agent_rl.models.hf_export import save_hf
from agent_rl.models import lora
from agent_rl.models.lora import LoraConfig
from agent_rl.models.inference import decode_step, forward, prefill
from agent_rl.models.logprobs import logprobs_from_hidden, token_entropy, token_logprobs
from agent_rl.models.presets import PRESETS, get_preset
from agent_rl.models.sampler import (Generation, SamplerConfig, decode_loop, sample,
                                    sampling_logprobs)
from agent_rl.models.transformer import Transformer

__all__ = [
    "ModelConfig", "RopeScaling", "get_preset", "PRESETS", "Transformer", "init_cache",
    "KVCache", "forward", "prefill", "decode_step", "ValueHead", "RewardHead",
    "token_logprobs", "token_entropy", "logprobs_from_hidden", "load_hf", "save_hf", "FAMILIES", "lora", "LoraConfig",
    "generate", "SamplerConfig", "Generation", "sample", "sampling_logprobs", "decode_loop",
]
