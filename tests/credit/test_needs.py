"""Kernel input declarations (credit/needs.py) are honest, and check_inputs refuses what an env
or config cannot provide, naming the kernel, the input and the env (issue 16 §3)."""
import dataclasses
import importlib.util
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ref_turns as ref
from agent_rl import credit, envs
from agent_rl.credit.needs import ENV_FIELDS, NEEDS, Needs, env_info_keys
from agent_rl.rollout.batch import from_turns

def _load(path, name):  # a sibling test folder's helper module, under a unique name
  spec = importlib.util.spec_from_file_location(name, os.path.join(os.path.dirname(__file__), path))
  mod = sys.modules[name] = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


CharTokenizer = _load("../envs/conftest.py", "envs_conftest_for_credit").CharTokenizer

SIZES = [3, 4, 2, 5]  # no singleton group: grpo_passk refuses those eagerly
T, K = 6, 2
N = sum(SIZES)

# A plausible random value of every extra a kernel may read (`[N, T]`).
EXTRA_GEN = {
    "question_index": lambda r: r.integers(0, 4, (N, T)).astype(np.int32),
    "prm_score": lambda r: r.random((N, T)).astype(np.float32),
    "step_mask": lambda r: r.random((N, T)) < 0.6,
    "skill_injected": lambda r: np.repeat(r.random((N, 1)) < 0.5, T, 1),
    "generation": lambda r: np.repeat(r.integers(0, 3, (N, 1)), T, 1).astype(np.int32),
    "parent": lambda r: np.repeat(r.integers(-1, N, (N, 1)), T, 1).astype(np.int32),
    "skill_return": lambda r: np.repeat(r.random((N, 1)), T, 1).astype(np.float32),
    "row_scores": lambda r: r.normal(size=(N, T)).astype(np.float32),
    "agent_return": lambda r: r.normal(size=(N, T)).astype(np.float32),
    "abnormal": lambda r: r.random((N, T)) < 0.2,
    "segment_reward": lambda r: r.normal(size=(N, T)).astype(np.float32),
    "segment_id": lambda r: r.integers(0, 3, (N, T)).astype(np.int32),
    "baseline_return": lambda r: np.repeat(r.normal(size=(N, 1)), T, 1).astype(np.float32),
}


def batch_for(needs: Needs, seed=0, *, optional=True):
  """A random batch with every input `needs` declares (optional extras too by default)."""
  rng = np.random.default_rng(seed)
  f, gid = ref.random_walk_batch(rng, SIZES, T, num_agents=3)
  f["reward"] = np.where(f["valid"], rng.normal(size=f["reward"].shape), 0).astype(np.float32)
  keys = list(needs.extras) + (list(needs.optional_extras) if optional else [])
  if needs.baseline_rollout:
    keys.append("baseline_return")
  extras = {k: EXTRA_GEN[k](rng) for k in keys}
  b = from_turns(f["reward"], f["valid"], gid, tokens_per_turn=K, extras=extras,
                 **{k: v for k, v in f.items() if k not in ("reward", "valid")})
  if needs.critic:
    b = b.replace(values=jnp.asarray(rng.normal(size=b.tokens.shape), jnp.float32))
  return b


def outputs(cr):
  return {k: np.asarray(v) for k, v in dataclasses.asdict(cr).items() if v is not None}


def same(a, b):
  return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_every_kernel_has_a_declaration():
  assert set(credit.names()) <= set(NEEDS)
  with pytest.raises(ValueError, match="env_fields.*extras"):
    Needs(env_fields=("question_index",))
  with pytest.raises(TypeError, match="Needs.extras"):
    Needs(extras="question_index")


@pytest.mark.parametrize("name", credit.names())
def test_declared_inputs_are_the_ones_read(name):
  nd = credit.needs_of(name)
  b, lean = batch_for(nd), batch_for(nd, optional=False)
  kernel = jax.jit(credit.get(name))  # one compile serves the lean batch and its perturbations
  base, lean_out = outputs(credit.get(name)(b)), outputs(kernel(lean))
  # An env field the kernel does not declare leaves its result untouched; a declared one matters
  # (on the required inputs alone: beacon's optional segment extras replace its milestones).
  rng = np.random.default_rng(5)
  for field in ENV_FIELDS:
    x = getattr(lean, field)
    other = (rng.integers(0, 3, x.shape) if x.dtype == jnp.int32 else rng.random(x.shape) < 0.5)
    got = outputs(kernel(lean.replace(**{field: jnp.asarray(other, x.dtype)})))
    assert same(got, lean_out) == (field not in nd.env_fields), (name, field)
  # A required extra is read: without it the kernel names it.
  for key in (*nd.extras, *(("baseline_return",) if nd.baseline_rollout else ())):
    with pytest.raises(ValueError, match=f"{name}.*{key}"):
      credit.get(name)(b.replace(extras={k: v for k, v in b.extras.items() if k != key}))
  # Optional extras are read too (the result changes without them), and are optional.
  if nd.optional_extras:
    assert not same(lean_out, base), name
  if nd.critic:
    with pytest.raises(ValueError, match="values"):
      credit.get(name)(b.replace(values=None))
  else:
    assert same(outputs(credit.get(name)(b.replace(values=None))), base)


@dataclasses.dataclass(frozen=True)
class QAEnv:
  """A one-step env that emits question_index (int32) and agent_id, like a memory agent."""
  action_len: int = 3

  def sample_task(self, key):
    return {"q": jax.random.randint(key, (), 1, 4)}

  def reset(self, key, task):
    return {"q": task["q"]}, envs.Text(jnp.zeros((2,), jnp.int32), jnp.int32(2))

  def step(self, state, action):
    ok = action.length > 0
    info = {"success": ok, "valid_action": ok, "state_hash": jnp.uint32(1),
            "reward_terms": jnp.stack([ok.astype(jnp.float32)]), "question_index": state["q"],
            "agent_id": jnp.int32(1)}
    return state, envs.Text(jnp.zeros((2,), jnp.int32), jnp.int32(2)), ok.astype(jnp.float32), ok, info


@pytest.fixture(scope="module")
def tok():
  return CharTokenizer()


@pytest.mark.parametrize("env_name", ["sokoban", "frozenlake", "qa"])
def test_env_info_keys_match_a_real_step(env_name, tok):
  env = QAEnv() if env_name == "qa" else envs.make(env_name, tokenizer=tok)
  key = jax.random.key(3)
  task = env.sample_task(key)
  state, _ = env.reset(key, task)
  a = getattr(env, "action_len", 4)
  info = jax.jit(env.step)(state, envs.Text(jnp.zeros((a,), jnp.int32), jnp.int32(1)))[4]
  assert env_info_keys(env) == set(info)
  assert env_info_keys(env, jax.eval_shape(env.sample_task, key)) == set(info)


def test_check_inputs_names_kernel_input_and_env(tok):
  soko, lake = envs.make("sokoban", tokenizer=tok), envs.make("frozenlake", tokenizer=tok)
  chk = lambda name, env, env_name, critic=False, **kw: credit.check_inputs(
      name, kw.pop("kwargs", {}), env=env, env_name=env_name, critic=critic, **kw)
  with pytest.raises(ValueError, match=r"^config\.credit\.name='uma' needs extra 'question_index', which "
                     r"env 'sokoban' does not emit in info; envs that emit it: ledger_stream$"):
    chk("uma", soko, "sokoban")
  with pytest.raises(ValueError, match=r"'beacon' needs batch\.milestone, which env 'frozenlake'.*"
                     r"envs that emit it: route, sokoban, texthouse, textlab$"):
    chk("beacon", lake, "frozenlake")
  assert chk("beacon", soko, "sokoban") == credit.needs_of("beacon")
  for name in ("drmas", "per_agent"):
    with pytest.raises(ValueError, match=f"'{name}' needs batch.agent_id.*'sokoban'"):
      chk(name, soko, "sokoban")
  with pytest.raises(ValueError, match="'fatal_aware' needs batch.fatal.*'frozenlake'"):
    chk("fatal_aware", lake, "frozenlake")
  # An env that emits them passes, also through an int32 extra traced into the kernel.
  for name in ("uma", "drmas", "per_agent"):
    chk(name, QAEnv(), "qa")
  chk("uma", soko, "host_env", info_keys={"success", "question_index"})  # caller-supplied keys


def test_check_inputs_critic_and_returns(tok):
  soko = envs.make("sokoban", tokenizer=tok)
  chk = lambda name, critic, **kw: credit.check_inputs(name, kw, env=soko, env_name="sokoban",
                                                       critic=critic)
  for name in ("gae", "bilevel_gae"):
    with pytest.raises(ValueError, match=f"'{name}' needs a critic.*config.model.critic != 'none'"):
      chk(name, False)
    chk(name, True, gamma=0.9)
  chk("reinforce_pp", True)  # token-level returns: a critic can train on them
  # Turn-level (or no) returns leave a configured critic without targets.
  with pytest.raises(ValueError, match=r"'gigpo' gives turn-level returns \[N, T\].*critic.*"
                     r"bilevel_gae, carl, gae, iterpo, reinforce_pp$"):
    chk("gigpo", True)
  with pytest.raises(ValueError, match="'grpo' gives no returns"):
    chk("grpo", True)
  chk("grpo", False)
  chk("gigpo", False)
  with pytest.raises(ValueError, match="'fatal_aware' with config.credit.kwargs.*estimator"):
    credit.check_inputs("fatal_aware", {"estimator": "bad"}, env=QAEnv(), env_name="qa",
                        critic=False, info_keys={"fatal"})


def test_check_inputs_baseline_rollout(tok):
  soko = envs.make("sokoban", tokenizer=tok)
  nd = credit.check_inputs("remax", {}, env=soko, env_name="sokoban", critic=False)
  assert nd.baseline_rollout
  with pytest.raises(ValueError, match="'remax' needs a greedy baseline.*strategy='dapo'"):
    credit.check_inputs("remax", {}, env=soko, env_name="sokoban", critic=False, strategy="dapo")
