"""Evaluate a run's checkpoint on held-out tasks, from the checkpoint alone.

    python -m agent_rl.train.evaluate --config=configs/ragen_sokoban.py:tiny --workdir=DIR \
        [--checkpoint=latest|best] [--config.eval.num_tasks=256 --config.eval.k=8]

Prints (and writes to DIR/eval.json) success, reward, pass@k and avg@k of the policy in the
newest readable (or best-by-eval) checkpoint of DIR, on the config's held-out task seeds.
The policy is restored through the one path that restores a run's policy
(`train.pretrained.load_run_policy`).
"""
import json
import os

from absl import app, flags, logging

from agent_rl.eval.evaluate import episode_config, evaluate
from agent_rl.parallel.placement import make_placement
from agent_rl.agents.routing import rollout_policy
from agent_rl.train.cli import define_config_flag
from agent_rl.train.config import check_fields
from agent_rl.train.metrics import to_host
from agent_rl.train.pretrained import load_run_policy, run_agents
from agent_rl.train.setup import build

_CONFIG = define_config_flag("config", "the run's config file")
_WORKDIR = flags.DEFINE_string("workdir", None, "the run's workdir (checkpoints, tokenizer)")
_WHICH = flags.DEFINE_enum("checkpoint", "latest", ["latest", "best"], "which checkpoint")
flags.mark_flags_as_required(["config", "workdir"])


def evaluate_checkpoint(c, workdir: str, which: str = "latest") -> dict:
  ck_dir = os.path.join(workdir, "checkpoints")
  if not os.path.isdir(ck_dir):
    raise FileNotFoundError(f"{ck_dir}: no checkpoints in this workdir")
  place = make_placement(c.mesh)
  with place.context():
    setup = build(c, workdir)
    ecfg = episode_config(c, setup.tokenizer)
    rp = load_run_policy(workdir, setup.model_cfg.vocab_size, place, which=which)
    ag = run_agents(workdir)
    policy = rollout_policy(ag.mode, rp.model_cfg, rp.lm_graphdef, ag.num)
    m = to_host(evaluate(policy, rp.params, setup.env,
                         setup.pieces,
                         ecfg, num_tasks=c.eval.num_tasks, seed=c.eval.seed, k=c.eval.k,
                         greedy=c.eval.greedy, place=place.batch))
  out = {"checkpoint_step": rp.step, **rp.meta, **m}
  with open(os.path.join(workdir, "eval.json"), "w") as f:
    json.dump(out, f, indent=2)
  return out


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  check_fields(_CONFIG.value)  # a mistyped --config.x override fails here, naming it
  print(json.dumps(evaluate_checkpoint(_CONFIG.value, _WORKDIR.value, _WHICH.value), indent=2))


if __name__ == "__main__":
  app.run(main)
