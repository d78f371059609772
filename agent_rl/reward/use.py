"""A reward-model run as a reward source of an RL run.

    --config.reward.model=runs/rm --config.reward.shapers=reward_model,kl_in_reward,overlong \
        [--config.reward.model_use=add|replace|process --config.reward.model_coef=1.0]

`load_for_rl` restores the reward model of a `reward.train` run (its best-by-held-out
checkpoint) onto the RL run's mesh, after checking it reads the policy's tokens; each
iteration `RewardSource.attach` scores the rollout in one jitted pass (`reward.model.
score_batch`, params restored sharded: no weight copy beyond its own params) and leaves the
scores in the batch's turn extras, where the registered `reward_model` shaper
(`objective.rm_shaper`) turns them into rewards before credit.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, NamedTuple

import jax.numpy as jnp

from agent_rl.objective.rm_shaper import RM_OUTCOME, RM_TURNS
from agent_rl.reward.model import reward_model_factory, score_batch
from agent_rl.reward.train import PHASE
from agent_rl.rollout.batch import EpisodeBatch
from agent_rl.tokenizers import load_tokenizer
from agent_rl.train import pretrained
from agent_rl.train.checkpoint import RunCheckpoint
from agent_rl.train.setup import model_config
from agent_rl.train.state import state_spec


@dataclasses.dataclass(frozen=True)
class RewardSource:
  """A frozen reward model on the RL run's mesh."""
  workdir: str
  kind: str  # the run's rm.kind: outcome | process
  graphdef: Any
  params: Any
  step: int

  def scores(self, batch: EpisodeBatch):
    return score_batch(self.graphdef, self.params, batch)

  def attach(self, batch: EpisodeBatch) -> EpisodeBatch:
    """`batch` with extras `rm/outcome` (outcome score on the last valid turn) and
    `rm/turns` (per-turn scores), both [N, T] f32."""
    s = self.scores(batch)
    v = batch.valid
    last = jnp.sum(v, axis=1, keepdims=True) - 1
    at_last = (jnp.arange(v.shape[1])[None, :] == last) & v
    return batch.replace(extras={**batch.extras, RM_OUTCOME: jnp.where(at_last, s.outcome[:, None], 0.0),
                                 RM_TURNS: jnp.where(v, s.turns, 0.0)})


def check_tokenizer(rm_dir: str, tok_rm, tok_policy, probe: str) -> None:
  """The reward model must read the policy's token ids: same vocabulary size and the same
  ids for `probe` (the env's instruction)."""
  if tok_rm.vocab_size != tok_policy.vocab_size or tok_rm.encode(probe) != tok_policy.encode(probe):
    raise ValueError(
        f"config.reward.model: the reward-model run {rm_dir} reads another tokenizer "
        f"(vocabulary {tok_rm.vocab_size}, the policy's {tok_policy.vocab_size}"
        f"{'' if tok_rm.vocab_size != tok_policy.vocab_size else ', different ids for the env instruction'}"
        "); train the reward model with the policy's tokenizer (rm.policy_run or tokenizer.path)")


class LoadedRM(NamedTuple):
  source: RewardSource
  tokenizer: Any  # the reward-model run's tokenizer
  model_cfg: Any  # its decoder's ModelConfig
  run_config: Any  # its saved run config


def restore_reward_model(rm_dir: str, place, *, which: str = "best",
                         field: str = "config.reward.model") -> LoadedRM:
  """The reward model of the `reward.train` run in `rm_dir` (its best-by-held-out checkpoint,
  or the newest with `which="latest"`) on `place`. Errors name `field` and the run."""
  tc = pretrained.load_run_config(rm_dir)
  tok = load_tokenizer(pretrained.run_tokenizer_path(rm_dir))
  mcfg = model_config(tc, tok.vocab_size)
  spec = state_spec(reward_model_factory(mcfg, int(tc.seed)), place)
  d = pretrained.checkpoint_dir(rm_dir)
  if not os.path.isdir(d):
    raise FileNotFoundError(f"{field}: {rm_dir} has no checkpoints/ directory")
  ck = RunCheckpoint(d, async_save=False, read_only=True)
  try:
    restored = ck.restore_params(spec.abstract_params(), which=which)
  except (FileNotFoundError, ValueError, KeyError, TypeError) as e:  # e.g. a policy run: no head
    raise ValueError(f"{field}: {rm_dir} is not a reward-model run (no readable "
                     f"reward-model checkpoint: {type(e).__name__}: {str(e)[:120]})") from None
  finally:
    ck.close()
  if restored.meta.get("phase") != PHASE:
    raise ValueError(f"{field}: {rm_dir} is not a reward-model run (its checkpoint "
                     f"is of phase {restored.meta.get('phase')!r})")
  src = RewardSource(rm_dir, tc.rm.kind, spec.graphdef, restored.params, restored.step)
  return LoadedRM(src, tok, mcfg, tc)


def load_for_rl(c, setup, place) -> RewardSource:
  """The reward model named by `config.reward.model`, checked against the run, on `place`."""
  rm_dir = c.reward.model
  tc = pretrained.load_run_config(rm_dir)
  tok = load_tokenizer(pretrained.run_tokenizer_path(rm_dir))
  check_tokenizer(rm_dir, tok, setup.tokenizer, setup.env.instruction)
  if c.reward.model_use == "process" and tc.rm.kind != "process":
    raise ValueError(f"config.reward.model_use: 'process' needs a process reward model; the run "
                     f"{rm_dir} trained rm.kind={tc.rm.kind!r}")
  return restore_reward_model(rm_dir, place).source
