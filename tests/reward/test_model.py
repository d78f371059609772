"""The reward model's scoring pass against a per-episode forward: each episode alone (its own
valid tokens only, batch of one), the read position found by a plain loop, the head applied
in NumPy; for concatenated and windowed rows, and sharded over a (data, fsdp) mesh."""
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from agent_rl import models
from agent_rl.parallel import init_sharded
from agent_rl.parallel.mesh import make_mesh
from agent_rl.parallel.placement import Placement
from agent_rl.reward.model import reward_model_factory, score_batch
from agent_rl.rollout.batch import from_turns

CFG = models.get_preset("tiny", vocab_size=64, hidden=32, num_layers=2, num_heads=2,
                        num_kv_heads=1, intermediate=64, head_dim=16)


def _batch(n=4, t=3, k=4, seed=0, windowed=False):
  """Episodes of t turns; turn j owns tokens [j*k, (j+1)*k); the last slot of each turn is an
  observation token (turn_index -1); ragged valid turns and trailing padding."""
  r = np.random.default_rng(seed)
  valid = np.ones((n, t), bool)
  valid[1, 2:] = False
  valid[3, 1:] = False
  b = from_turns(np.zeros((n, t)), valid, np.arange(n) // 2, tokens_per_turn=k)
  ti = np.asarray(b.turn_index).copy()
  ti[:, k - 1::k] = -1  # observation slot
  tok = r.integers(1, CFG.vocab_size, ti.shape).astype(np.int32)
  attn = np.repeat(valid, k, axis=1)
  pos = np.broadcast_to(np.arange(t * k), ti.shape).copy()
  seg = 0
  if windowed:  # each turn its own sample: positions restart, all slots valid
    seg, pos, attn = k, np.tile(np.arange(k), (n, t)), np.ones_like(attn)
  return b.replace(tokens=jnp.asarray(tok), turn_index=jnp.asarray(ti), position=jnp.asarray(pos),
                   attention_mask=jnp.asarray(attn), segment_len=seg)


def _reference(model, batch):
  """Per episode (and per window): forward the row alone, read by a Python loop."""
  tok, ti = np.asarray(batch.tokens), np.asarray(batch.turn_index)
  pos, attn = np.asarray(batch.position), np.asarray(batch.attention_mask)
  n, t = batch.reward.shape
  w = np.asarray(model.head.kernel[...])[:, 0]
  bias = float(np.asarray(model.head.bias[...])[0])
  s = batch.segment_len or tok.shape[1]
  out, turns = np.zeros(n), np.zeros((n, t))
  for i in range(n):
    hid = np.zeros((tok.shape[1], CFG.hidden))
    for a in range(0, tok.shape[1], s):  # each sample forwarded alone, only its valid prefix
      m = int(attn[i, a:a + s].sum())
      if m:
        _, h, _ = model.lm.apply(jnp.asarray(tok[i:i + 1, a:a + m]), jnp.asarray(pos[i:i + 1, a:a + m]),
                                 jnp.ones((1, m), bool))
        hid[a:a + m] = np.asarray(h[0])
    last = -1
    for j in range(tok.shape[1]):
      if ti[i, j] >= 0:
        turns[i, ti[i, j]] = hid[j] @ w + bias
        last = j
    out[i] = hid[last] @ w + bias if last >= 0 else 0.0
  return out, turns


def _model():
  return reward_model_factory(CFG, 3)()


def test_score_equals_per_episode_forward_concatenated():
  model = _model()
  batch = _batch()
  g, p = nnx.split(model)
  got = score_batch(g, p, batch)
  want_o, want_t = _reference(model, batch)
  np.testing.assert_allclose(np.asarray(got.outcome), want_o, atol=2e-5)
  np.testing.assert_allclose(np.asarray(got.turns), want_t, atol=2e-5)
  # The outcome is the last valid turn's score; absent turns score 0.
  assert float(got.turns[3, 1]) == 0.0 and float(got.outcome[3]) == float(got.turns[3, 0])


def test_score_equals_per_window_forward_windowed():
  model = _model()
  batch = _batch(windowed=True, seed=1)
  g, p = nnx.split(model)
  got = score_batch(g, p, batch)
  want_o, want_t = _reference(model, batch)
  np.testing.assert_allclose(np.asarray(got.outcome), want_o, atol=2e-5)
  np.testing.assert_allclose(np.asarray(got.turns), want_t, atol=2e-5)


def test_score_sharded_like_the_policy():
  mesh = make_mesh((4, 2, 1), ("data", "fsdp", "tensor"), devices=jax.devices()[:8])
  place = Placement(mesh)
  g, p = init_sharded(reward_model_factory(CFG, 3), mesh, place.rules)
  batch = _batch(n=8, t=2, seed=2)
  with place.context():
    got = score_batch(g, p, place.batch(batch))
  assert got.outcome.sharding.spec[0] is not None  # rows stay sharded over the batch axes
  want_o, want_t = _reference(nnx.merge(g, jax.device_get(p)), batch)
  np.testing.assert_allclose(np.asarray(got.outcome), want_o, atol=2e-5)
  np.testing.assert_allclose(np.asarray(got.turns), want_t, atol=2e-5)
