"""RunCheckpoint: the one on-disk layout. Whole-state resume, params-only restore (best and
latest, LM subtree alone), keep-N together with best-by-eval, corrupt-step fallback, and a
clear error on the previous layout."""
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl.train.checkpoint import CheckpointLayoutError, RunCheckpoint, abstract_like


def _params(v):
  return {"lm": {"w": jnp.full((4, 3), v, jnp.float32)}, "value_head": {"b": jnp.full((3,), -v)}}


def _opt(v):
  return {"opt_state": {"mu": jnp.full((4, 3), 2 * v)}, "step": jnp.int32(int(v)),
          "rng": jnp.zeros((2,), jnp.uint32)}


def _save(ck, step, v, eval_success=None, force=True):
  metrics = None if eval_success is None else {"eval/success": eval_success}
  ck.save(step, _params(v), _opt(v), {"phase": "rl", "sft_step": 0, "iteration": step},
          reference={"w": jnp.full((4, 3), -1.0)}, metrics=metrics, force=force)


def test_resume_params_only_and_best(tmp_path):
  ck = RunCheckpoint(str(tmp_path / "ck"), keep=2, async_save=False)
  _save(ck, 1, 1.0, eval_success=0.9)  # the best; older than keep=2
  _save(ck, 2, 2.0, eval_success=0.1)
  _save(ck, 3, 3.0)
  _save(ck, 4, 4.0)
  ck.close()
  ck = RunCheckpoint(str(tmp_path / "ck"), keep=2, async_save=False)
  assert ck.all_steps() == [1, 3, 4]  # latest 2 + the best by eval/success
  assert ck.best_step() == 1
  targets = lambda meta: (abstract_like(_params(0.0)), abstract_like(_opt(0.0)),
                          abstract_like({"w": jnp.zeros((4, 3))}))
  r = ck.restore_run(targets)
  assert r.step == 4 and r.meta["iteration"] == 4 and r.meta["layout"] == 2
  np.testing.assert_array_equal(r.params["lm"]["w"], 4.0)
  np.testing.assert_array_equal(r.opt["opt_state"]["mu"], 8.0)
  np.testing.assert_array_equal(r.reference["w"], -1.0)
  lm_target = abstract_like(_params(0.0)["lm"])
  best = ck.restore_params(lm_target, which="best", lm_only=True)
  assert best.step == 1 and best.opt is None
  np.testing.assert_array_equal(best.params["w"], 1.0)
  latest = ck.restore_params(abstract_like(_params(0.0)), which="latest")
  np.testing.assert_array_equal(latest.params["value_head"]["b"], -4.0)
  ck.close()


def test_corrupt_latest_falls_back(tmp_path):
  ck = RunCheckpoint(str(tmp_path / "ck"), keep=3, async_save=False)
  _save(ck, 1, 1.0)
  _save(ck, 2, 2.0)
  ck.close()
  for root, _, files in os.walk(tmp_path / "ck" / "2" / "params"):
    for f in files:
      with open(os.path.join(root, f), "wb") as fh:
        fh.write(b"garbage")
  ck = RunCheckpoint(str(tmp_path / "ck"), keep=3, async_save=False)
  targets = lambda meta: (abstract_like(_params(0.0)), abstract_like(_opt(0.0)), None)
  r = ck.restore_run(targets)
  assert r.step == 1
  assert os.path.isdir(tmp_path / "ck_corrupt" / "2")
  ck.close()


def test_previous_layout_is_refused_by_name(tmp_path):
  import orbax.checkpoint as ocp
  old = ocp.CheckpointManager(str(tmp_path / "ck"), item_names=("state", "meta"))
  old.save(5, args=ocp.args.Composite(state=ocp.args.StandardSave({"rl": _params(1.0),
                                                                   "sft": _params(1.0)}),
                                      meta=ocp.args.JsonSave({"phase": "rl"})))
  old.wait_until_finished()
  old.close()
  ck = RunCheckpoint(str(tmp_path / "ck"), async_save=False)
  with pytest.raises(CheckpointLayoutError, match="previous layout.*'rl' and 'sft'"):
    ck.restore_params(abstract_like(_params(0.0)))
  ck.close()


def test_cadence_is_orbax_policy(tmp_path):
  ck = RunCheckpoint(str(tmp_path / "ck"), keep=5, save_steps=(2, 4), async_save=False)
  saved = [s for s in range(1, 6) if ck.save(s, _params(s), _opt(s), {"phase": "rl"})]
  assert saved == [2, 4] and not ck.preempted(5)
  ck.close()


def test_run_config_round_trip_keeps_kwargs(tmp_path):
  from agent_rl.train import pretrained
  from agent_rl.train.config import base_config
  c = base_config()
  c.credit.name, c.credit.kwargs.gamma, c.env.kwargs.max_steps = "gigpo", 0.95, 6
  c.rollout.strategy_kwargs.keep_ratio = 0.5
  pretrained.save_run_config(c, str(tmp_path))
  r = pretrained.load_run_config(str(tmp_path))
  assert r.to_dict() == c.to_dict()
