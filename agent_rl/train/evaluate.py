"""Evaluate a run's checkpoint on held-out tasks, from the checkpoint alone.

    python -m agent_rl.train.evaluate --config=configs/ragen_sokoban.py:tiny --workdir=DIR \
        [--checkpoint=latest|best] [--config.eval.num_tasks=256 --config.eval.k=8]

Prints (and writes to DIR/eval.json, or --out=FILE) success, reward, pass@k and avg@k of the
policy in the newest readable (or best-by-eval) checkpoint of DIR, on the config's held-out task
seeds, and the same on every `eval.variant_kwargs` and `eval.counterparts` panel (eval/<name>/...),
through the same function as the run's own evaluations (`eval.evaluate.evaluate_panels`):

    # agent 0 of a DealLite run against bob of another seed's run and of its own step 10
    python -m agent_rl.train.evaluate --config=configs/ibrl_deal.py:tiny --workdir=runs/a \
        --config.eval.counterparts.cross=runs/b --config.eval.counterparts.early=runs/a@10

`--episodes=N` adds the first N greedy held-out episodes as text (under "episodes", and printed
after the metrics): what the policy does, e.g. a policy run's warm start, without training again.

The policy is restored through the one path that restores a run's policy
(`train.pretrained.load_run_policy`).
"""
import json
import os

from absl import app, flags, logging

from agent_rl.agents import counterparts
from agent_rl.eval.episodes import config_episodes
from agent_rl.eval.evaluate import episode_config, evaluate_panels
from agent_rl.parallel.placement import make_placement
from agent_rl.agents.routing import rollout_policy
from agent_rl.train.cli import define_config_flag
from agent_rl.train.config import check_fields, validate
from agent_rl.train.pretrained import load_run_policy, run_agents
from agent_rl.train.setup import build, eval_variants

_CONFIG = define_config_flag("config", "the run's config file")
_WORKDIR = flags.DEFINE_string("workdir", None, "the run's workdir (checkpoints, tokenizer)")
_WHICH = flags.DEFINE_enum("checkpoint", "latest", ["latest", "best"], "which checkpoint")
_OUT = flags.DEFINE_string("out", None, "where the JSON goes (default WORKDIR/eval.json)")
_EPISODES = flags.DEFINE_integer("episodes", 0, "render this many greedy held-out episodes")
flags.mark_flags_as_required(["config", "workdir"])


def evaluate_checkpoint(c, workdir: str, which: str = "latest", out_path: str | None = None,
                        episodes: int = 0) -> dict:
  """The checkpoint's held-out metrics (module docstring), with `episodes` rendered greedy
  held-out episodes (the first of the tasks `eval/success` scores) under "episodes"."""
  if episodes < 0:
    raise ValueError(f"--episodes must be >= 0, got {episodes}")
  ck_dir = os.path.join(workdir, "checkpoints")
  if not os.path.isdir(ck_dir):
    raise FileNotFoundError(f"{ck_dir}: no checkpoints in this workdir")
  validate(c)  # eval panels and counterparts are checked before anything is restored
  place = make_placement(c.mesh)
  with place.context():
    setup = build(c, workdir)
    ecfg = episode_config(c, setup.tokenizer)
    # The evaluation's own remat / prefill chunks (its --config), the run's weights.
    rp = load_run_policy(workdir, setup.model_cfg.vocab_size, place, which=which,
                         compute=setup.model_cfg)
    ag = run_agents(workdir)
    policy = rollout_policy(ag.mode, rp.model_cfg, rp.lm_graphdef, ag.num)
    m = evaluate_panels(c, policy, rp.params, setup, ecfg, place.batch,
                        eval_variants(c, setup), counterparts.load(c, setup, place))
    if episodes:
      m["episodes"] = config_episodes(c, policy, rp.params, setup, ecfg, place.batch, episodes)
  out = {"checkpoint_step": rp.step, **rp.meta, **m}
  with open(out_path or os.path.join(workdir, "eval.json"), "w") as f:
    json.dump(out, f, indent=2)
  return out


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)
  check_fields(_CONFIG.value)  # a mistyped --config.x override fails here, naming it
  out = evaluate_checkpoint(_CONFIG.value, _WORKDIR.value, _WHICH.value, _OUT.value,
                            _EPISODES.value)
  texts = out.pop("episodes", [])
  print(json.dumps(out, indent=2))
  for text in texts:
    print("\n" + text)


if __name__ == "__main__":
  app.run(main)
