"""configs/drmas_kbqa.py validates at start-up in every variant, before anything compiles: the
roles wrapper over KB-SearchQA with the searcher -> answerer schedule and per-role reward
scales, the Dr. MAS arm groups by agent and the GRPO arm pools, and along the expert plans
both agents act in every episode and each is scored by its own scaled return
(`agent_return`). The shrunk 2-iteration runs of both arms are in tests/train/test_configs.py."""
import importlib.util
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from agent_rl import credit, envs
from agent_rl.agents.rewards import attach_agent_return
from agent_rl.envs.base import Text
from agent_rl.train.config import validate
from tests.train.test_configs import CONFIGS, load

PATH = os.path.join(os.path.dirname(CONFIGS[0]), "drmas_kbqa.py")


def _char_tokenizer():
  spec = importlib.util.spec_from_file_location(
      "envs_conftest_for_drmas_kbqa", os.path.join(os.path.dirname(__file__), "..", "envs",
                                                    "conftest.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod.CharTokenizer()


TOK = _char_tokenizer()


@struct.dataclass
class _Batch:  # the fields attach_agent_return reads
  valid: jax.Array
  agent_id: jax.Array
  extras: dict


@pytest.mark.parametrize("arg", ["tiny", "tiny,grpo", "tiny,lora", "tiny,shared",
                                 "tiny,searcher_scale=0.5", "full"])
def test_every_variant_validates(arg):
  c = load(PATH, arg)
  validate(c)
  k = c.env.kwargs
  assert (c.env.name, k.base, tuple(k.roles)) == ("roles", "kb_search_qa", ("searcher", "answerer"))
  assert tuple(k.schedule) == (0,) * (c.rollout.max_turns - 1) + (1,)
  assert k.base_kwargs.max_turns == c.rollout.max_turns and c.rollout.history == "windowed"
  assert c.rollout.window_turns == c.rollout.max_turns - 1  # the answerer reads every result
  assert c.credit.name == "drmas"
  assert (c.credit.kwargs.group_by_agent, c.credit.kwargs.get("pooled_rows", False)) == (
      (False, True) if "grpo" in arg else (True, False))
  assert c.agents.mode == ("lora" if "lora" in arg else "shared" if "shared" in arg
                           else "separate")


def test_comparison_arms_are_the_variants():
  spec = importlib.util.spec_from_file_location("drmas_kbqa_cfg", PATH)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  comp = mod.COMPARISON
  assert comp.method == "Dr. MAS" and comp.baselines == ("GRPO",) and comp.paper_verified
  assert mod.get_config("tiny," + comp.arms["GRPO"]).credit.kwargs.pooled_rows


def test_expert_episodes_pay_each_agent_its_own_scaled_return():
  c = load(PATH, "tiny")
  env = envs.make(c.env.name, tokenizer=TOK, **dict(c.env.kwargs))
  assert env.role_reward_terms == ("role/searcher", "role/answerer")
  needs = credit.check_inputs(c.credit.name, dict(c.credit.kwargs), env=env,
                              env_name=c.env.name, critic=False)
  assert "agent_id" in needs.env_fields
  n, t, a_len = 6, c.rollout.max_turns, 72
  tasks = jax.vmap(env.sample_task)(jax.random.split(jax.random.key(3), n))
  plans = [env.solve(jax.tree.map(lambda x: x[i], tasks)) for i in range(n)]
  assert all(len(p) == t for p in plans), plans  # 2 searches + the answer: the schedule
  step = jax.jit(jax.vmap(env.step))
  state, _ = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.key(0), n), tasks)
  cols, agents = [], []
  for s in range(t):
    # the expert's turns; on odd episodes a half-right answer (EM 0, F1 in (0, 1))
    acts = [p[s] if s < t - 1 or i % 2 == 0 else f"<answer>{p[s][8:-9].split()[0]} zzz</answer>"
            for i, p in enumerate(plans)]
    toks = np.zeros((n, a_len), np.int32)
    for i, x in enumerate(acts):
      ids = TOK.encode(x)[:a_len]
      toks[i, :len(ids)] = ids
    lens = jnp.asarray([min(len(TOK.encode(x)), a_len) for x in acts], jnp.int32)
    state, _, _, _, info = step(state, Text(tokens=jnp.asarray(toks), length=lens))
    cols.append(np.asarray(info["reward_terms"]))
    agents.append(np.asarray(info["agent_id"]))
  terms, agent = np.stack(cols, 1), np.stack(agents, 1)      # [N, T, 5], [N, T]
  assert (agent == np.asarray([0] * (t - 1) + [1])).all()
  names = env.reward_names
  extras = {f"reward_terms/{m}": jnp.asarray(terms[..., j]) for j, m in enumerate(names)}
  batch = attach_agent_return(_Batch(valid=jnp.ones((n, t), bool), agent_id=jnp.asarray(agent),
                                     extras=extras), env)
  ret = np.asarray(batch.extras["agent_return"])
  em, f1 = terms[..., names.index("em")].sum(1), terms[..., names.index("f1")].sum(1)
  for i in range(n):
    want = [0.2 * f1[i]] * (t - 1) + [1.0 * em[i]]
    np.testing.assert_allclose(ret[i], want, rtol=1e-6, err_msg=str(i))
  assert em.min() < 1 <= em.max() and 0 < f1.min(), (em, f1)  # full and partial answers
