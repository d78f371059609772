"""Evaluate a run's latest checkpoint on held-out tasks, from the checkpoint alone.

    python -m agent_rl.evaluate --config=configs/ragen_sokoban.py:tiny --workdir=DIR \
        [--config.eval.num_tasks=256 --config.eval.k=8 --config.eval.greedy=False]

Prints (and writes to DIR/eval.json) success, reward, pass@k and avg@k of the policy in the
newest readable checkpoint of DIR, on the config's held-out task seeds.
"""
import json
import os

import jax
from absl import app, flags, logging
from ml_collections import config_flags

from agent_rl.eval.evaluate import episode_config, evaluate
from agent_rl.rollout.policy import Policy
from agent_rl.train.checkpoint import Checkpointer, abstract_like
from agent_rl.train.metrics import to_host
from agent_rl.train.optim import make_optimizer
from agent_rl.train.setup import build
from agent_rl.train.sharding import init_state, make_placement

_CONFIG = config_flags.DEFINE_config_file("config", None, "the run's config file", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "the run's workdir (checkpoints, tokenizer)")
flags.mark_flags_as_required(["config", "workdir"])


def evaluate_checkpoint(c, workdir: str) -> dict:
  ck_dir = os.path.join(workdir, "checkpoints")
  if not os.path.isdir(ck_dir):
    raise FileNotFoundError(f"{ck_dir}: no checkpoints in this workdir")
  place = make_placement(c)
  with place.context():
    return _evaluate_checkpoint(c, workdir, ck_dir, place)


def _evaluate_checkpoint(c, workdir, ck_dir, place):
  setup = build(c, workdir)
  ecfg = episode_config(c, setup.tokenizer)
  opt = make_optimizer(c.optim, 1)
  _, lm_graphdef, state = init_state(c, setup.model_cfg, opt, place)
  ckpt = Checkpointer(ck_dir, async_save=False)
  restored = ckpt.restore_latest({"rl": abstract_like(state), "sft": abstract_like(state)})
  if restored is None:
    raise FileNotFoundError(f"{ck_dir}: no readable checkpoint")
  step, states, meta = restored
  params = states["rl" if meta.get("phase") == "rl" else "sft"].params
  m = to_host(evaluate(Policy.from_model(setup.model_cfg, lm_graphdef), params["lm"], setup.env,
                       setup.pieces, ecfg, num_tasks=c.eval.num_tasks, seed=c.eval.seed,
                       k=c.eval.k, greedy=c.eval.greedy, place=place.batch))
  out = {"checkpoint_step": step, **meta, **m}
  with open(os.path.join(workdir, "eval.json"), "w") as f:
    json.dump(out, f, indent=2)
  return out


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  print(json.dumps(evaluate_checkpoint(_CONFIG.value, _WORKDIR.value), indent=2))


if __name__ == "__main__":
  app.run(main)
