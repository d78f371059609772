"""SORL turn-level ratio loss (ALGORITHMS.md §4.12) vs a per-turn loop reference."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import losses_np_ref as ref
from agent_rl import losses
from losses_testutil import make_batch

F = lambda x: jnp.asarray(x, jnp.float32)
CONFIGS = [
    dict(clip_norm="none"),
    dict(clip_norm="unclipped", clip_norm_threshold=0.05),   # triggers
    dict(clip_norm="unclipped", clip_norm_threshold=0.95),   # does not trigger
    dict(clip_norm="shrink", clip_norm_threshold=0.05),
    dict(clip_norm="none", clip_ratio_c=1.5, clip_ratio_high=0.28),
]


def _run(d, ti, configs, weights=True):
  def run(lp, old, adv, m, w, ti):
    return [losses.get("sorl")(lp, old, adv, m, turn_index=ti, weights=w, **c) for c in configs]
  return jax.jit(run)(F(d["lp"]), F(d["old"]), F(d["adv"]), F(d["m"]),
                      F(d["w"]) if weights else None, jnp.asarray(ti))


def _ref(d, ti, c, weights=True):
  return ref.sorl(d["lp"], d["old"], d["adv"], d["m"], ti, d["w"] if weights else None,
                  lo=c.get("clip_ratio", 0.2), hi=c.get("clip_ratio_high", 0.2),
                  c=c.get("clip_ratio_c"), norm=c["clip_norm"],
                  threshold=c.get("clip_norm_threshold", 0.2))


@pytest.mark.parametrize("seed", [0, 1])
def test_sorl_matches_reference(seed):
  d = make_batch(seed, b=6, l=10, spread=0.5)
  outs = _run(d, d["ti"], CONFIGS)
  triggered = []
  for c, (loss, met) in zip(CONFIGS, outs):
    want, want_met = _ref(d, d["ti"], c)
    np.testing.assert_allclose(float(loss), want, rtol=2e-5, atol=2e-6, err_msg=str(c))
    for k, v in want_met.items():
      if v is not None:
        np.testing.assert_allclose(float(met[k]), v, rtol=2e-5, atol=2e-6, err_msg=f"{c} {k}")
    triggered.append(float(met["norm_triggered"]))
  assert triggered[1] == 1.0 and triggered[2] == 0.0
  assert float(outs[4][1]["clipfrac_lower"]) > 0


def test_sorl_turn_labels_are_arbitrary_and_turns_share_one_ratio():
  d = make_batch(2, b=4, l=8, spread=0.5)
  relabel = np.where(d["ti"] >= 0, 7 * d["ti"] + 3, d["ti"])  # same partition, other labels
  a, b = _run(d, d["ti"], CONFIGS[:2]), _run(d, relabel, CONFIGS[:2])
  for (la, _), (lb, _) in zip(a, b):
    np.testing.assert_allclose(float(la), float(lb), rtol=1e-6)
  # One turn per row (turn_index = 0) is a sequence-level geometric-mean ratio.
  zeros = np.zeros_like(d["ti"])
  (loss, met), = _run(d, zeros, [dict(clip_norm="none")], weights=False)
  want, _ = ref.sorl(d["lp"], d["old"], d["adv"], d["m"], zeros, norm="none")
  np.testing.assert_allclose(float(loss), want, rtol=2e-5, atol=2e-6)
  assert float(met["num_turns"]) == (d["m"].sum(1) > 0).sum()


def test_sorl_bad_clip_norm():
  d = make_batch(3)
  with pytest.raises(ValueError, match="unclipped"):
    losses.get("sorl")(F(d["lp"]), F(d["old"]), F(d["adv"]), F(d["m"]),
                       turn_index=jnp.asarray(d["ti"]), clip_norm="sometimes")
