"""agent_rl: JAX-native reinforcement learning of LLM agents.

Rooms (see README and shared DESIGN.md): models, tokenizers, envs, rollout, credit, losses,
parallel, data, train, eval.
"""
__version__ = "0.1.0"
