"""Teacher-forced replay of solver plans through the compiled episode loop."""
import jax
import jax.numpy as jnp
import numpy as np

from agent_rl import envs
from agent_rl.envs.tasks import sample_tasks
from agent_rl.data.scripted import encode_plans, scripted_policy
from agent_rl.rollout.compiled import rollout
from agent_rl.rollout.episode import EpisodeConfig
from agent_rl.rollout.layout import chat_pieces
from agent_rl.rollout.sampler import SamplerConfig
from agent_rl.tokenizers import ByteTokenizer


def test_replayed_plans_solve_and_mask_exactly_the_actions():
  tok = ByteTokenizer()
  env = envs.make("sokoban", tokenizer=tok, dim_room=(6, 6), num_boxes=1, max_steps=20)
  seeds = list(range(6))
  tasks = sample_tasks(env, seeds)
  plans = [env.solve(jax.tree.map(lambda x: x[i], tasks)) for i in range(len(seeds))]
  t_max = max(len(p) for p in plans)
  a = 24
  forced = encode_plans(tok, plans, t_max, a)
  end = tok.special("<|im_end|>")
  cfg = EpisodeConfig(sampler=SamplerConfig(greedy=True, max_tokens=a, stop_tokens=(end,)),
                      max_turns=t_max, group_size=1)
  pieces = chat_pieces(tok, env.instruction)
  batch, _ = rollout(scripted_policy(tok.vocab_size), jnp.asarray(forced), env, tasks,
                     jax.random.key(0), cfg, pieces)
  # Every optimal plan, replayed, solves its task in exactly len(plan) turns.
  assert np.all(np.asarray(jnp.any(batch.success, axis=1)))
  np.testing.assert_array_equal(np.asarray(batch.valid.sum(1)), [len(p) for p in plans])
  # The loss mask covers exactly the action text + <|im_end|> of each turn.
  toks, mask, ti = map(np.asarray, (batch.tokens, batch.loss_mask, batch.turn_index))
  for i, plan in enumerate(plans):
    for t, act in enumerate(plan):
      got = toks[i][(ti[i] == t) & (mask[i] > 0)]
      assert tok.decode(got[:-1]) == f"<answer>{act}</answer>"
      assert got[-1] == end


def test_windowed_replay_follows_the_plan_turn_by_turn():
  """Windowed history prefills a fresh cache each turn; the replay still plays turn t's
  script at turn t (`Policy.turn_cache`), so solver plans solve as in concatenated history."""
  tok = ByteTokenizer()
  env = envs.make("sokoban", tokenizer=tok, dim_room=(6, 6), num_boxes=1, max_steps=20)
  seeds = [s for s in range(40)
           if len(env.solve(jax.tree.map(lambda x: x[0], sample_tasks(env, [s])))) >= 3][:4]
  tasks = sample_tasks(env, seeds)
  plans = [env.solve(jax.tree.map(lambda x: x[i], tasks)) for i in range(4)]
  t_max, a = max(len(p) for p in plans), 24
  end = tok.special("<|im_end|>")
  cfg = EpisodeConfig(sampler=SamplerConfig(greedy=True, max_tokens=a, stop_tokens=(end,)),
                      max_turns=t_max, group_size=1, history="windowed", window_turns=1)
  batch, _ = rollout(scripted_policy(tok.vocab_size), jnp.asarray(encode_plans(tok, plans, t_max, a)),
                     env, tasks, jax.random.key(0), cfg, chat_pieces(tok, env.instruction))
  assert np.all(np.asarray(jnp.any(batch.success, axis=1)))
  np.testing.assert_array_equal(np.asarray(batch.valid.sum(1)), [len(p) for p in plans])
