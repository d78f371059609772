"""The smallest multi-agent run: DealLite self-play (two roles), windowed, seconds of compute."""
from tests.train.tiny import tiny_config


def tiny_agents_config(mode: str, *, iterations=2, sft_steps=0, credit="per_agent"):
  c = tiny_config(iterations=iterations, ckpt_every=1, sft_steps=sft_steps, credit=credit,
                  env="deal_lite")
  c.env.kwargs = {"max_turns": 3}
  c.rollout.history, c.rollout.window_turns, c.rollout.window_tokens = "windowed", 1, 0
  c.rollout.max_turns, c.rollout.max_action_tokens = 3, 16
  c.agents.mode = mode
  if mode == "lora":
    c.model.lora.rank = 4
  c.log.episodes = 0
  c.loss.entropy_coef = 0.01  # a gradient on every agent even when all rewards tie
  return c
