"""agg_loss, token_logprobs and entropy against loop references (ALGORITHMS.md §1.9, §1.10)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import losses_np_ref as ref
from agent_rl import losses
from losses_testutil import make_batch, x64

MODES = list(losses.AGG_MODES)


@jax.jit
def _all_modes(loss_mat, m, num_tokens=None, num_seqs=None, scale=None):
  return [losses.agg_loss(loss_mat, m, mode, num_tokens=num_tokens, num_seqs=num_seqs, scale=scale)
          for mode in MODES]


def test_agg_matches_reference():
  d = make_batch(1)
  loss_mat = d["adv"] * d["lp"]
  got = _all_modes(jnp.asarray(loss_mat, jnp.float32), jnp.asarray(d["m"], jnp.float32))
  for mode, g in zip(MODES, got):
    np.testing.assert_allclose(g, ref.agg(loss_mat, d["m"], mode), rtol=1e-5, atol=1e-6)


def test_agg_global_counts_and_fractional_mask():
  d = make_batch(2)
  m = d["m"] * d["w"]  # a float mask acts as per-token weights
  loss_mat = d["adv"] ** 2
  kw = dict(num_tokens=37.0, num_seqs=9.0, scale=128.0)
  got = _all_modes(jnp.asarray(loss_mat, jnp.float32), jnp.asarray(m, jnp.float32), **kw)
  for mode, g in zip(MODES, got):
    np.testing.assert_allclose(g, ref.agg(loss_mat, m, mode, **kw), rtol=1e-5, atol=1e-6)


def test_agg_all_masked_is_zero_and_padding_cannot_leak():
  loss_mat = jnp.full((3, 4), jnp.inf).at[1, 2].set(2.0)
  assert all(float(v) == 0.0 for v in _all_modes(loss_mat, jnp.zeros((3, 4))))
  m = jnp.zeros((3, 4)).at[1, 2].set(1.0)
  assert all(np.isfinite(float(v)) for v in _all_modes(jnp.where(m > 0, 2.0, jnp.nan), m))


def test_agg_mode_values_differ_as_documented():
  # Two rows, lengths 1 and 3: the modes weight them differently.
  loss_mat = jnp.array([[4.0, 0, 0], [1.0, 1.0, 1.0]])
  m = jnp.array([[1.0, 0, 0], [1.0, 1.0, 1.0]])
  got = dict(zip(MODES, _all_modes(loss_mat, m)))
  assert float(got["token-mean"]) == pytest.approx(7 / 4)
  assert float(got["seq-mean-token-sum"]) == pytest.approx(7 / 2)
  assert float(got["seq-mean-token-mean"]) == pytest.approx(5 / 2)
  assert float(got["seq-mean-token-sum-norm"]) == pytest.approx(7 / 2 / 3)  # / B_eff / L


def _verl(loss_mat, m, mode, **kw):
  torch = pytest.importorskip("torch")
  import verl_agg_ref
  return float(verl_agg_ref.agg_loss(torch.tensor(loss_mat), torch.tensor(m), mode, **kw))


@pytest.mark.parametrize("mode", MODES)
def test_agg_matches_verl_091(mode):
  """Parity with verl 0.9.1's agg_loss (torch reference), local and global counts, a float
  mask, an all-masked row (make_batch's row 0)."""
  d = make_batch(3, b=6, l=9)
  loss_mat, m = d["adv"] * d["lp"], d["m"] * d["w"]
  f32 = lambda x: jnp.asarray(x, jnp.float32)
  got = losses.agg_loss(f32(loss_mat), f32(m), mode)
  np.testing.assert_allclose(got, _verl(loss_mat, m, mode), rtol=1e-5, atol=1e-6)
  got = losses.agg_loss(f32(loss_mat), f32(m), mode, num_tokens=31.0, num_seqs=11.0, scale=64.0)
  want = _verl(loss_mat, m, mode, batch_num_tokens=31.0, global_batch_size=11.0,
               loss_scale_factor=64.0)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_agg_whole_batch_equals_verl_data_parallel_mean(mode):
  """verl on 2 dp ranks (local rows, global counts, x dp_size), averaged over ranks, equals our
  one-program loss over the whole batch; the gradients agree too."""
  torch = pytest.importorskip("torch")
  import verl_agg_ref
  d = make_batch(4, b=6, l=5)
  loss_mat, m = d["adv"] ** 2, d["m"]
  n_tok, n_seq = m.sum(), float((m.sum(-1) > 0).sum())
  x = torch.tensor(loss_mat, requires_grad=True)
  ranks = [verl_agg_ref.agg_loss(x[r], torch.tensor(m[r]), mode, dp_size=2, batch_num_tokens=n_tok,
                                 global_batch_size=n_seq) for r in (slice(0, 3), slice(3, 6))]
  want = (ranks[0] + ranks[1]) / 2
  want.backward()
  f = lambda lm: losses.agg_loss(lm, jnp.asarray(m), mode)
  with x64():
    got, grad = jax.value_and_grad(f)(jnp.asarray(loss_mat, jnp.float64))
  np.testing.assert_allclose(got, float(want.detach()), rtol=1e-10)
  np.testing.assert_allclose(grad, x.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_agg_unknown_mode_names_known_modes():
  with pytest.raises(ValueError, match="seq-mean-token-mean"):
    losses.agg_loss(jnp.zeros((2, 2)), jnp.ones((2, 2)), "token-sum")


def test_token_logprobs_and_entropy_match_reference():
  rng = np.random.default_rng(0)
  logits = rng.normal(0, 3, (2, 3, 11))
  targets = rng.integers(0, 11, (2, 3))
  lp = jax.jit(losses.token_logprobs)(jnp.asarray(logits, jnp.float32), jnp.asarray(targets))
  h = jax.jit(losses.entropy_from_logits)(jnp.asarray(logits, jnp.bfloat16))
  assert h.dtype == jnp.float32
  lp, h = np.asarray(lp), np.asarray(h)
  z_bf16 = np.asarray(jnp.asarray(logits, jnp.bfloat16).astype(jnp.float32), np.float64)
  for i, t in np.ndindex(2, 3):
    assert float(lp[i, t]) == pytest.approx(ref.log_softmax(logits[i, t])[targets[i, t]], abs=1e-5)
    assert float(h[i, t]) == pytest.approx(ref.entropy(z_bf16[i, t]), abs=1e-4)
  m = (rng.random((2, 3)) < 0.7).astype(np.float64)
  ent = np.array([[ref.entropy(logits[i, t]) for t in range(3)] for i in range(2)])
  got = jax.jit(losses.entropy_loss, static_argnums=2)(jnp.asarray(logits, jnp.float32),
                                                       jnp.asarray(m), "seq-mean-token-mean")
  assert float(got) == pytest.approx(ref.agg(ent, m, "seq-mean-token-mean"), rel=1e-5)


def test_registry_get_lists_known_losses():
  assert losses.names() == sorted(["vanilla", "gspo", "sapo", "cispo", "geo_mean", "gpg",
                                   "reinforce", "clip_cov", "kl_cov", "sorl"])
  assert losses.LOSSES.names() == losses.names()
  with pytest.raises(KeyError, match="vanilla"):
    losses.get("ppo2")
