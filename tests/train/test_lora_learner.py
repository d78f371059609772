"""A LoRA learner (config.model.lora.rank > 0): only adapters train, the (bf16) base stays
bit-identical, the optimizer holds no base-sized moments, adapters shard like their base
weights on 8 fake devices, resume is exact and the restored policy carries its adapters;
LoRA dropout (model.lora.dropout) acts in the training forward only, trains and resumes
bit-exactly, and at p = 0 leaves the traced program as it was."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agent_rl.objective.minibatch import Minibatch
from agent_rl.parallel.placement import make_placement
from agent_rl.train import lora_learner
from agent_rl.train.config import validate
from agent_rl.train.optim import make_optimizer
from agent_rl.train.policy import make_apply
from agent_rl.train.pretrained import load_run_policy
from agent_rl.train.run import SimulatedKill, run
from agent_rl.train.setup import model_config, model_factory
from agent_rl.train.sft import make_sft_loss
from agent_rl.train.state import init_params, jit_step, new_train_state, state_spec
from agent_rl.train.step import make_train_step
from tests.train.tiny import tiny_config

VOCAB = 400


def lora_config(**kw):
  c = tiny_config(**kw)
  c.model.lora.rank, c.model.lora.alpha, c.model.lora.targets = 4, 8.0, "q,v,o,up,down"
  return c


def _flat(tree):
  return {jax.tree_util.keystr(p): x if isinstance(x, jax.ShapeDtypeStruct) else np.asarray(x)
          for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]}


def _records(wd):
  with open(os.path.join(wd, "metrics.jsonl")) as f:
    return [{k: v for k, v in json.loads(ln).items() if not k.startswith("time/")} for ln in f]


@pytest.mark.parametrize("field,value,msg", [
    ("rank", -1, "model.lora.rank"), ("targets", "q,nope", "lora.targets"),
    ("alpha", 0.0, "lora.alpha"), ("dropout", -0.1, "config.model.lora.dropout"),
    ("dropout", 1.0, "config.model.lora.dropout")])
def test_bad_lora_config_names_the_field(field, value, msg):
  c = lora_config()
  c.model.lora[field] = value
  with pytest.raises(ValueError, match=msg):
    validate(c)


def test_model_config_carries_lora():
  c = lora_config()
  c.model.lora.dropout = 0.1
  validate(c)
  lc = model_config(c, VOCAB).lora
  assert (lc.rank, lc.alpha, lc.dropout, lc.targets) == (4, 8.0, 0.1, ("q", "v", "o", "up", "down"))
  c.model.lora.rank = 0
  assert model_config(c, VOCAB).lora is None


def test_optimizer_state_holds_only_adapters():
  c = lora_config(critic="shared")
  c.model.param_dtype = "bfloat16"
  spec = state_spec(model_factory(c, model_config(c, VOCAB)), make_placement(c.mesh))
  flat = _flat(spec.params)
  train = {k for k in flat if "_lora_" in k or not k.startswith("['lm']")}
  assert any("value_head" in k for k in train) and any("_lora_a" in k for k in train)
  for k, a in flat.items():  # the frozen base may be bf16 while adapters stay f32
    if k.startswith("['lm']"):
      assert a.dtype == (np.float32 if "_lora_" in k else jax.numpy.bfloat16), k
  opt = lora_learner.freeze_base(make_optimizer(c.optim, 10))
  abstract, _ = spec.opt_layout(opt)
  train_bytes = sum(int(np.prod(flat[k].shape)) * flat[k].dtype.itemsize for k in train)
  # AdamW: mu and nu per trainable leaf (f32), plus step counters; nothing for the base.
  got = lora_learner.state_bytes(abstract)
  assert 2 * train_bytes <= got <= 2 * train_bytes + 64, (got, train_bytes)
  full, _ = spec.opt_layout(make_optimizer(c.optim, 10))
  assert lora_learner.state_bytes(full) > 4 * got
  shapes = {a.shape for a in jax.tree.leaves(abstract)}
  base_shapes = {flat[k].shape for k in flat if k not in train}
  assert not (shapes & base_shapes - {a.shape for k, a in flat.items() if k in train})


def test_adapters_shard_like_their_base_on_8_devices():
  c = lora_config()
  c.model.num_heads, c.model.num_kv_heads = 4, 2
  c.rollout.num_tasks, c.rollout.group_size = 8, 2  # batches split over fsdp=4
  c.train.minibatch_episodes, c.sft.batch_size, c.eval.num_tasks = 8, 8, 8
  c.mesh.num_devices, c.mesh.data, c.mesh.fsdp, c.mesh.tensor = 8, 1, 4, 2
  validate(c)
  place = make_placement(c.mesh)
  spec = state_spec(model_factory(c, model_config(c, VOCAB)), place)
  sh = {jax.tree_util.keystr(p): s.spec for p, s in
        jax.tree_util.tree_flatten_with_path(spec.param_shardings)[0]}
  attn = "['lm']['layers'][0]['attn']"
  for t, n_in in (("q", 1), ("v", 1), ("o", 2)):
    base = tuple(sh[f"{attn}['{t}'].value"]) + (None,) * 3
    a, b = sh[f"{attn}['{t}_lora_a'].value"], sh[f"{attn}['{t}_lora_b'].value"]
    assert tuple(a)[:n_in] == base[:n_in] and (tuple(a) + (None,))[n_in] is None, (t, a, base)
    assert tuple(b)[1:] == base[n_in:n_in + len(b) - 1], (t, b, base)
  assert any(ax is not None for ax in sh[f"{attn}['q_lora_a'].value"])  # really sharded
  with place.context():  # adapters are born sharded and the optimizer state follows them
    params = init_params(spec)
  a = params["lm"]["layers"][0]["attn"]["q_lora_a"][...]
  assert len(a.sharding.device_set) == 8 and a.sharding.spec == sh[f"{attn}['q_lora_a'].value"]


# CI budget: the dropout learner test above checks LoRA resume bit for bit at the learner;
# this full run (SFT + RL through run.py, ~150 s) runs with -m slow.
@pytest.mark.slow
def test_tiny_lora_run_trains_adapters_only_and_resumes_exactly(tmp_path):
  c = lora_config(iterations=4, ckpt_every=2, sft_steps=2)
  c.model.param_dtype = "bfloat16"
  c.model.lora.dropout = 0.1  # masks from the step key: resume must still be exact
  full, killed = str(tmp_path / "full"), str(tmp_path / "killed")
  run(c, full)
  with pytest.raises(SimulatedKill):
    run(c, killed, kill_after=3)
  run(c, killed)
  assert _records(killed) == _records(full)  # exact resume, optimizer state included
  place = make_placement(c.mesh)
  spec = state_spec(model_factory(c, model_config(c, VOCAB)), place)
  with place.context():
    before = _flat(init_params(spec)["lm"])
  pol = load_run_policy(full, VOCAB, place, which="latest")
  assert pol.model_cfg.lora is not None  # the restored policy carries its adapters
  after = _flat(pol.params)
  assert before.keys() == after.keys()
  changed = [k for k in before if not np.array_equal(before[k], after[k])]
  assert changed and all("_lora_" in k for k in changed), changed  # adapters moved, base not
  assert any("_lora_b" in k for k in changed)  # B started at zero: the delta is live
  assert any(r.get("grad/norm", 0) > 0 for r in _records(full))


def _dropout_spec(dropout):
  c = lora_config()
  c.model.lora.dropout = dropout
  validate(c)
  place = make_placement(c.mesh)
  return state_spec(model_factory(c, model_config(c, VOCAB)), place)


def _rows():
  tok = jnp.asarray((np.arange(16)[None, :] * np.array([[1], [3], [5], [7]])) % 50 + 10,
                    jnp.int32)  # 4 learnable rows (arithmetic sequences)
  ones = jnp.ones(tok.shape, jnp.float32)
  pos = jnp.broadcast_to(jnp.arange(16, dtype=jnp.int32), tok.shape)
  return Minibatch(tokens=tok, position=pos, attention_mask=ones > 0, loss_mask=ones,
                   turn_index=jnp.zeros(tok.shape, jnp.int32), old_logprobs=0 * ones,
                   advantages=0 * ones)


def _dropout_setup(dropout):
  """(jitted SFT step of the LoRA learner, fresh TrainState, rows) on a tiny model."""
  spec = _dropout_spec(dropout)
  opt = lora_learner.freeze_base(optax.adam(3e-2))
  loss = lora_learner.frozen_loss(make_sft_loss(make_apply(spec.graphdef)))
  with spec.place.context():
    state = new_train_state(spec, init_params(spec), opt, seed=0)
  return jit_step(make_train_step(loss, opt), spec, opt), state, spec.place.batch(_rows())


def _losses(step, state, rows, n):
  out = []
  for _ in range(n):
    state, m = step(state, rows)
    out.append(float(m["sft/loss"]))
  return state, out


def test_lora_dropout_learner_trains_and_resumes_bit_exactly():
  """dropout 0.1: the SFT loss falls, the trajectory differs from p = 0 (masks are live:
  B = 0 makes step 0 equal, later steps not), and steps 0-3, a host round trip of the state
  (what a checkpoint restore gives), then steps 4-7 equal steps 0-7 bit for bit."""
  step, state, rows = _dropout_setup(0.1)
  pytree = lambda s: jax.tree.map(np.asarray, jax.device_get(s))
  init = pytree(state)
  restore = lambda host: jax.tree.map(lambda x, ref: jax.device_put(x, ref.sharding), host, state)
  full, losses = _losses(step, restore(init), rows, 8)
  half, first = _losses(step, restore(init), rows, 4)
  resumed, second = _losses(step, restore(pytree(half)), rows, 4)
  assert first + second == losses
  for a, b in zip(jax.tree.leaves(pytree(full)), jax.tree.leaves(pytree(resumed))):
    np.testing.assert_array_equal(a, b)
  more, later = _losses(step, full, rows, 12)
  assert np.mean(later[-3:]) < losses[0] - 0.5, (losses, later)
  step0, state0, rows0 = _dropout_setup(0.0)
  _, plain = _losses(step0, state0, rows0, 4)
  assert plain[0] == losses[0] and plain[1:] != losses[1:4], (plain, losses)


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_lora_dropout_key_reaches_only_the_training_forward(dropout):
  """make_apply with the step key: at p = 0 the traced program equals the keyless one (no
  RNG op), at p > 0 it draws masks (scoring passes no key: see tests/models/test_lora.py)."""
  spec, rows = _dropout_spec(dropout), _rows()
  apply = make_apply(spec.graphdef)
  trace = lambda use: str(jax.make_jaxpr(lambda p, k: apply(
      p, rows.tokens, rows.position, rows.attention_mask, dropout_key=k if use else None))(
          spec.params, jax.random.key(0)))  # abstract params: nothing is allocated
  with_key = trace(True)
  assert (with_key == trace(False)) == (dropout == 0)
  assert ("random_bits" in with_key) == (dropout > 0)
