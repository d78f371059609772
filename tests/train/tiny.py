"""The smallest end-to-end config (seconds of compute) shared by the learner tests, and the
environment of a run a test starts as a subprocess."""
import os

from agent_rl.train.config import base_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def child_env(devices=None, **extra):
  """os.environ for a subprocess run: CPU, this checkout on PYTHONPATH, and the test process's
  XLA flags (tests/conftest.py: the LLVM level) less its 8 fake devices, with `devices` fake
  devices instead (None: one device)."""
  flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
           if not f.startswith("--xla_force_host_platform_device_count")]
  if devices:
    flags.append(f"--xla_force_host_platform_device_count={devices}")
  return dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu", XLA_FLAGS=" ".join(flags),
              **extra)


def tiny_config(*, iterations=2, ckpt_every=1, sft_steps=0, credit="grpo", loss="vanilla",
                env="sokoban", critic="none"):
  c = base_config()
  c.env.name = env
  if env == "sokoban":
    c.env.kwargs.max_steps = 6
  c.model.hidden, c.model.num_layers, c.model.num_heads = 32, 1, 2
  c.model.num_kv_heads, c.model.intermediate = 1, 64
  c.model.critic = critic
  c.tokenizer.vocab_size = 400
  c.rollout.num_tasks, c.rollout.group_size = 2, 2
  c.rollout.max_turns, c.rollout.max_action_tokens = 2, 8
  c.credit.name, c.loss.name = credit, loss
  c.sft.steps, c.sft.batch_size, c.sft.num_demos = sft_steps, 4, 8
  c.train.iterations, c.train.minibatch_episodes = iterations, 2
  c.train.eval_every, c.train.ckpt_every = 2, ckpt_every
  c.eval.num_tasks, c.eval.k = 4, 2
  c.mesh.num_devices = 1  # tests see 8 fake devices; the sharded tests ask for them explicitly
  return c


def host_config(workers=0, overlap=True, iterations=2):
  """tiny_config on the KeyRoom toy host game (envs/host/toy.py): the host-run path in seconds."""
  c = tiny_config(iterations=iterations, ckpt_every=1, env="host:toy")
  c.env.kwargs.num_rooms, c.env.kwargs.max_steps = 3, 4
  c.env.host.workers, c.env.host.overlap = workers, overlap
  c.env.host.obs_tokens, c.env.host.eval_split = 48, "eval"
  c.env.host.extras = "steps"
  c.log.episodes = 0
  return c


def host_demos(env, tok, num_demos: int, max_action_tokens: int, **kw):
  """host_demo_batches (data/host_demos.py) of `num_demos` demos from seed 1000 on
  `host_config`'s episode settings with 4 turns; kw: world_model, iwm_alternatives."""
  from agent_rl.data.host_demos import host_demo_batches
  from agent_rl.eval.evaluate import episode_config
  from agent_rl.rollout.layout import chat_pieces
  c = host_config()
  c.rollout.max_turns, c.rollout.max_action_tokens = 4, max_action_tokens
  return host_demo_batches(env, tok, episode_config(c, tok),
                           chat_pieces(tok, env.instruction, "sys"), tok.vocab_size, num_demos,
                           1000, **kw)


def same_tree(a, b) -> bool:
  """Whether two param trees hold the same leaves bit for bit (host copies compared)."""
  import jax
  import numpy as np
  return all(np.array_equal(np.asarray(x), np.asarray(y))
             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


def checkpoint_params(c, workdir, step):
  """The params of checkpoint `step` of the run in `workdir`, restored onto `c`'s mesh."""
  import os
  from agent_rl.parallel.placement import make_placement
  from agent_rl.train.checkpoint import RunCheckpoint
  from agent_rl.train.setup import build, model_factory
  from agent_rl.train.state import state_spec
  place = make_placement(c.mesh)
  with place.context():
    setup = build(c, workdir)
    spec = state_spec(model_factory(c, setup.model_cfg), place)
    ck = RunCheckpoint(os.path.join(workdir, "checkpoints"), async_save=False, read_only=True)
    params = ck.restore_params(spec.abstract_params(), step=step).params
    ck.close()
  return params
