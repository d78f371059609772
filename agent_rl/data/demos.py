"""Expert demonstrations as a TFDS dataset (array_record; no TensorFlow needed).

Each example is one solved task: the task's seed (tasks are regenerated exactly from
`env.sample_task(jax.random.key(seed))`) and the solver's plan, one action string per
turn. Token sequences are *not* stored: the SFT learner replays the plan through the same
episode renderer the rollout uses, so SFT and RL see byte-identical prompts.

    builder = DemoBuilder(env=env, env_name="sokoban", seeds=range(512), data_dir=workdir)
    builder.download_and_prepare()
    demos = load_demos(builder)        # list of (seed, [action, ...])
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Sequence

import jax
import numpy as np
import tensorflow_datasets as tfds

from agent_rl.envs.tasks import sample_tasks

SEP = "\n"


class DemoBuilder(tfds.core.GeneratorBasedBuilder):
  """Solver demonstrations for one environment configuration.

  The builder's name embeds a digest of the env name, its kwargs and the seed list, so
  different settings never share files.
  """

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Solver plans keyed by task seed."}

  def __init__(self, *, env: Any, env_name: str, env_kwargs: dict | None = None,
               seeds: Sequence[int], **kwargs: Any):
    self._env = env
    self._seeds = [int(s) for s in seeds]
    spec = json.dumps({"env": env_name, "kwargs": env_kwargs or {}, "seeds": self._seeds},
                      sort_keys=True, default=str)
    self._digest = hashlib.sha1(spec.encode()).hexdigest()[:10]
    kwargs.setdefault("file_format", "array_record")
    super().__init__(**kwargs)

  @property
  def name(self) -> str:  # type: ignore[override]
    return f"demos_{self._digest}"

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self,
        description="Expert solver plans (one action string per turn) keyed by task seed.",
        features=tfds.features.FeaturesDict({
            "seed": np.int64,
            "plan": tfds.features.Text(),
            "num_actions": np.int32,
        }))

  def _split_generators(self, dl_manager):  # noqa: ARG002
    return {"train": self._generate_examples()}

  def _generate_examples(self):
    tasks = sample_tasks(self._env, self._seeds)
    for i, seed in enumerate(self._seeds):
      task = jax.tree.map(lambda x: x[i], tasks)
      plan = list(self._env.solve(task))
      if any(SEP in a for a in plan):
        raise ValueError(f"solver action contains the separator {SEP!r}: {plan}")
      yield seed, {"seed": seed, "plan": SEP.join(plan), "num_actions": len(plan)}


def prepare(builder: DemoBuilder) -> None:
  """Builds the dataset once (later calls reuse the files), without TFDS's progress bars."""
  tfds.disable_progress_bar()
  builder.download_and_prepare()


def load_demos(builder: DemoBuilder) -> list[tuple[int, list[str]]]:
  """(seed, plan) pairs sorted by seed (deterministic order for exact resume)."""
  src = builder.as_data_source()["train"]
  out = []
  for i in range(len(src)):
    ex = src[i]
    plan = ex["plan"].decode() if isinstance(ex["plan"], bytes) else str(ex["plan"])
    out.append((int(ex["seed"]), plan.split(SEP) if plan else []))
  return sorted(out)
