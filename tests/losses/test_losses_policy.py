"""Policy losses (ALGORITHMS.md §1.7, §1.9, §4.9) vs loop references: values, metrics, gradients."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import losses_np_ref as ref
from agent_rl import losses
from losses_testutil import fd_grad, make_batch, x64

MODES = list(losses.AGG_MODES)


def _call(name, d, *, weights=True, dtype=jnp.float32, modes=None, **kw):
  """One jitted evaluation; with `modes`, a list of results, one per loss_agg_mode."""
  f = lambda x: jnp.asarray(x, dtype)

  def run(lp, old, adv, m, w):
    if modes is None:
      return losses.get(name)(lp, old, adv, m, weights=w, **kw)
    return [losses.get(name)(lp, old, adv, m, weights=w, loss_agg_mode=mode, **kw)
            for mode in modes]

  return jax.jit(run)(f(d["lp"]), f(d["old"]), f(d["adv"]), f(d["m"]), f(d["w"]) if weights else None)


def _check(got, want, tol=2e-5):
  loss, metrics = got
  want_loss, want_metrics = want
  np.testing.assert_allclose(float(loss), want_loss, rtol=tol, atol=tol)
  for k, v in want_metrics.items():
    np.testing.assert_allclose(float(metrics[k]), v, rtol=tol, atol=tol, err_msg=k)
  for k in ("clipfrac", "clipfrac_lower", "ppo_kl", "approx_kl"):
    assert metrics[k].shape == ()


@pytest.mark.parametrize("seed", [0, 1])
def test_vanilla_dual_clip_and_clip_higher(seed):
  d = make_batch(seed, spread=0.6)
  i, t = np.argwhere((d["m"] > 0) & (d["adv"] < 0))[0]
  d["old"][i, t] = d["lp"][i, t] - 1.5  # ratio e^1.5 > c = 3: the dual clip binds
  got = _call("vanilla", d, modes=MODES, clip_ratio_low=0.2, clip_ratio_high=0.28)
  for mode, g in zip(MODES, got):
    want = ref.vanilla(d["lp"], d["old"], d["adv"], d["m"], d["w"], lo=0.2, hi=0.28, mode=mode)
    _check(g, want)
  assert 0 < float(got[0][1]["clipfrac"]) < 1 and float(got[0][1]["clipfrac_lower"]) > 0


def test_vanilla_without_dual_clip_and_global_counts():
  d = make_batch(3, spread=1.5)
  got = _call("vanilla", d, weights=False, clip_ratio_c=None, num_tokens=50.0)
  want = ref.vanilla(d["lp"], d["old"], d["adv"], d["m"], None, c=None, num_tokens=50.0)
  _check(got, want)
  with pytest.raises(ValueError, match="clip_ratio_c"):
    _call("vanilla", d, clip_ratio_c=1.0)


def test_gspo_forces_seq_mean_token_mean():
  d = make_batch(4, spread=0.3)
  want = ref.gspo(d["lp"], d["old"], d["adv"], d["m"], d["w"], lo=3e-4, hi=4e-4)
  for got in _call("gspo", d, modes=MODES, clip_ratio_low=3e-4, clip_ratio_high=4e-4):
    _check(got, want)


def test_sapo():
  d = make_batch(5)
  _check(_call("sapo", d, loss_agg_mode="token-mean", tau_neg=1.3),
         ref.sapo(d["lp"], d["old"], d["adv"], d["m"], d["w"], tau_neg=1.3))


def test_cispo():
  d = make_batch(6)
  for mode, got in zip(MODES, _call("cispo", d, modes=MODES, clip_ratio_high=0.28)):
    loss, met, _ = ref.cispo(d["lp"], d["old"], d["adv"], d["m"], d["w"], hi=0.28, mode=mode)
    _check(got, (loss, met))


@pytest.mark.parametrize("weights", [False, True])
def test_geo_mean_ignores_mode(weights):
  d = make_batch(7)
  want = ref.geo_mean(d["lp"], d["old"], d["adv"], d["m"], d["w"] if weights else None)
  for got in _call("geo_mean", d, weights=weights, modes=MODES):
    _check(got, want)


def test_gpg():
  d = make_batch(8)
  for mode, got in zip(MODES, _call("gpg", d, modes=MODES)):
    _check(got, ref.gpg(d["lp"], d["old"], d["adv"], d["m"], d["w"], mode))


@pytest.mark.parametrize("turns", [False, True])
def test_reinforce_per_step_mean(turns):
  d = make_batch(9)
  ti = d["ti"] if turns else None
  got = _call("reinforce", d, turn_index=None if ti is None else jnp.asarray(ti))
  _check(got, ref.reinforce(d["lp"], d["old"], d["adv"], d["m"], d["w"], ti))


def test_all_masked_batch_gives_zero_loss_and_finite_grads():
  d = make_batch(10)
  d["m"] = np.zeros_like(d["m"])
  f = lambda k: jnp.asarray(d[k], jnp.float32)
  for name in losses.names():
    fn = lambda lp: losses.get(name)(lp, f("old"), f("adv"), f("m"), weights=f("w"),
                                     key=jax.random.PRNGKey(0), turn_index=jnp.asarray(d["ti"]))[0]
    val, g = jax.jit(jax.value_and_grad(fn))(f("lp"))
    assert float(val) == 0.0, name
    assert np.all(np.asarray(g) == 0.0), name


def test_bad_inputs_name_the_field():
  d = make_batch(11)
  with pytest.raises(ValueError, match="advantages"):
    losses.get("vanilla")(d["lp"], d["old"], d["adv"][:, :3], d["m"])
  with pytest.raises(ValueError, match="loss_agg_mode"):
    losses.get("gpg")(d["lp"], d["old"], d["adv"], d["m"], loss_agg_mode="mean")
  with pytest.raises(TypeError, match="clip_eps"):
    losses.get("vanilla")(d["lp"], d["old"], d["adv"], d["m"], clip_eps=0.2)
  with pytest.raises(ValueError, match="turn_index"):
    losses.get("sorl")(d["lp"], d["old"], d["adv"], d["m"])
  with pytest.raises(ValueError, match="key"):
    losses.get("clip_cov")(d["lp"], d["old"], d["adv"], d["m"])


def test_bf16_inputs_compute_in_float32():
  d = make_batch(12)
  loss, met = _call("vanilla", d, dtype=jnp.bfloat16)
  assert loss.dtype == jnp.float32 and met["ppo_kl"].dtype == jnp.float32


# ---- gradients (float64) ----------------------------------------------------------------------

FD_LOSSES = {
    "vanilla": dict(clip_ratio_high=0.28),
    "sapo": {},
    "geo_mean": {},
    "gpg": dict(loss_agg_mode="seq-mean-token-sum"),
    "reinforce": {},
    "kl_cov": dict(kl_cov_ratio=0.2, ppo_kl_coef=0.5),
    "clip_cov": dict(clip_cov_ratio=0.2, clip_cov_lb=-10.0, clip_cov_ub=10.0),
    "sorl": {},
}


@pytest.mark.parametrize("name", sorted(FD_LOSSES))
def test_gradient_matches_finite_differences(name):
  d = make_batch(13, b=3, l=4, spread=0.5)
  with x64():
    args = {k: jnp.asarray(d[k]) for k in ("old", "adv", "m", "w")}
    kw = dict(FD_LOSSES[name], key=jax.random.PRNGKey(3), turn_index=jnp.asarray(d["ti"]))
    fn = jax.jit(lambda lp: losses.get(name)(lp, args["old"], args["adv"], args["m"],
                                             weights=args["w"], **kw)[0])
    g = jax.jit(jax.grad(fn))(jnp.asarray(d["lp"]))
    assert g.dtype == jnp.float64
    np.testing.assert_allclose(g, fd_grad(fn, d["lp"]), rtol=1e-5, atol=1e-8)
    assert np.abs(np.asarray(g)).sum() > 0


def test_gspo_gradient_matches_analytic():
  d = make_batch(14, b=4, l=5, spread=0.05)
  d["old"][2] = d["lp"][2] - 11.0  # a row whose log-ratio hits the upper clamp of 10
  with x64():
    f = lambda k: jnp.asarray(d[k])
    fn = lambda lp: losses.get("gspo")(lp, f("old"), f("adv"), f("m"), weights=f("w"),
                                       clip_ratio=0.02)[0]
    g = jax.jit(jax.grad(fn))(f("lp"))
  want = ref.gspo_grad(d["lp"], d["old"], d["adv"], d["m"], d["w"], lo=0.02, hi=0.02)
  np.testing.assert_allclose(g, want, rtol=1e-7, atol=1e-10)
  assert np.abs(want).sum() > 0


def test_cispo_gradient_matches_analytic():
  d = make_batch(15, b=3, l=6, spread=0.6)
  with x64():
    f = lambda k: jnp.asarray(d[k])
    fn = lambda lp: losses.get("cispo")(lp, f("old"), f("adv"), f("m"), weights=f("w"))[0]
    g = jax.jit(jax.grad(fn))(f("lp"))
  np.testing.assert_allclose(g, ref.cispo(d["lp"], d["old"], d["adv"], d["m"], d["w"])[2],
                             rtol=1e-7, atol=1e-10)


# ---- compilation ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["vanilla", "clip_cov", "sorl", "gspo"])
def test_jit_does_not_retrace_across_batches(name):
  chex.clear_trace_counter()

  @jax.jit
  @chex.assert_max_traces(n=1)
  def step(lp, old, adv, m, ti, key):
    return jax.value_and_grad(lambda x: losses.get(name)(x, old, adv, m, turn_index=ti, key=key),
                              has_aux=True)(lp)

  for seed in range(3):
    d = make_batch(seed)
    f = lambda k: jnp.asarray(d[k], jnp.float32)
    (loss, _), g = step(f("lp"), f("old"), f("adv"), f("m"), jnp.asarray(d["ti"]),
                        jax.random.PRNGKey(seed))
    assert np.isfinite(float(loss)) and np.all(np.isfinite(g))
