"""GiGPO vs GRPO on Sokoban (Feng et al., 2025, "Group-in-Group Policy Optimization for LLM
Agent Training", arXiv:2505.10978; ALGORITHMS.md §2).

GiGPO adds a step-level advantage from anchor-state groups (turns of the G episodes of a
task that start in the same state) to GRPO's episode-level advantage: A = A^E + w * A^S,
gamma = 0.95, mean_norm, invalid-action penalty 0.1.

  # the policy run every Sokoban credit row starts from (once; reproduce.py builds it first
  # where it is missing: the row's priors), then the row
  python -m agent_rl.train --config=configs/ragen_sokoban.py:tiny --workdir=runs/sokoban_sft40 \
      --config.train.iterations=0 --config.sft.steps=40
  python launch/reproduce.py --paper=gigpo_sokoban --scale=tiny --seeds=3
  # one arm by hand (variants: grpo | rloo | ppo, the baselines)
  python -m agent_rl.train --config=configs/gigpo_sokoban.py:tiny --workdir=/tmp/gigpo \
      --config.model.init_from=runs/sokoban_sft40 \
      --config.tokenizer.path=runs/sokoban_sft40/tokenizer.model

Regime (issue 22 §2: RL, not the warm start, must carry the learning): the graph-credit rows'
(configs/rewardflow_sokoban.py): the policy after 40 SFT steps (held-out greedy success ~0.44
against a ~0.9 ceiling), then 30 RL iterations of 16 tasks x 8 with the clip-higher PPO loss; no
SFT phase in this config, so a tiny run without `init_from` trains from scratch (the config
tests do). The arms differ only in `config.credit` (and PPO's critic: a value head on the
policy trunk, GAE with gamma 0.95). The GiGPO and GRPO arms are the graph-credit rows' runs.

`full` fine-tunes a downloaded Qwen2.5-1.5B-Instruct (the paper's smaller policy); model
config, tokenizer and chat template come from the directory (`tokenizer.path` empty):

  python -m agent_rl.train --config=configs/gigpo_sokoban.py:full --workdir=runs/gigpo \
      --config.model.init_from=/ckpt/Qwen2.5-1.5B-Instruct
  python -m agent_rl.export --workdir=runs/gigpo --out=runs/gigpo/hf

Hyper-parameters of `full` [G: recalled from the GiGPO paper (its ALFWorld / WebShop setup,
which Sokoban shares) and not re-checked against the paper in this repo (no access here):
verify before citing; U: not stated for Sokoban, our choice]:
  policy Qwen2.5-1.5B-Instruct [G]; gamma 0.95, step-advantage weight w = 1, mean_norm
  [G]; group size 8 [G] over 16 tasks per iteration [G]; actor lr 1e-6 [G]; clip 0.2 [G]
  (clip-higher 0.28 [U], as RAGEN); temperature 1.0 [G]; invalid-action penalty 0.1 [G]
  (the env's default); KL-to-reference loss coef 0.01, low_var_kl [G]; 6x6 1-box Sokoban
  [U]; 5 turns of one action and 128 new tokens per turn [U]; 200 iterations [U];
  mini-batch 32 episodes [U]; bf16 compute over float32 master weights [U]. Without
  `init_from`, `full` is a randomly initialized Qwen2.5-1.5B-shaped model (not the paper's).

Expected: full — the paper reports GiGPO > GRPO on Sokoban / ALFWorld / WebShop with
Qwen2.5-1.5B/7B (and over RLOO and PPO on ALFWorld / WebShop); not reproduced here (no
accelerator).
Measured (tiny, 3 seeds, 2026-12-03, `python launch/reproduce.py --paper=gigpo_sokoban
--seeds=3`, benchmarks/results/reproduce/gigpo_sokoban.md; ~5 min a run, two at once; GiGPO and
GRPO are the graph-credit rows' runs, reused): held-out greedy success GiGPO 0.484 on every
seed, as GRPO; RLOO 0.490, PPO 0.474: GiGPO - RLOO -0.005 [-0.028, +0.017], - PPO +0.010
[-0.070, +0.091] (n.s.). On avg@4 (sampled) GiGPO beats PPO, +0.055 [+0.038, +0.071] (the
critic arm falls below the policy run's level: 0.426), and ties GRPO (-0.001) and RLOO
(+0.007, n.s.). In 30 iterations from the 0.44 policy every critic-free arm ends at ~0.48:
step-level credit has little to separate at this scale.
"""
from agent_rl.eval.reproduce import Comparison
from agent_rl.train.config import scaled_config
from agent_rl.train.world_defaults import (SOKOBAN_SFT40_OVERRIDES, SOKOBAN_SFT40_RUN,
                                          gigpo_or_baseline, sokoban_from_policy_run)

VARIANTS = dict(grpo=False, rloo=False, ppo=False)
COMPARISON = Comparison(  # the paper reports no Sokoban numbers we hold: direction only
    arms={"GiGPO": "", "GRPO": "grpo", "RLOO": "rloo", "PPO": "ppo"}, method="GiGPO",
    baselines=("GRPO", "RLOO", "PPO"), metrics=("eval/success", "eval/avg@4"),
    overrides=SOKOBAN_SFT40_OVERRIDES,
    priors=(SOKOBAN_SFT40_RUN,),
    paper_source="GiGPO (arXiv:2505.10978): GiGPO > GRPO, RLOO, PPO on Sokoban/ALFWorld/WebShop [G]",
    paper_verified=False, setting="Sokoban 6x6, 1 box, from a 40-step SFT policy run")


def get_config(arg: str | None = None):
  c, args = scaled_config(arg, VARIANTS)
  sokoban_from_policy_run(c)
  gigpo_or_baseline(c, args)
  if c.scale == "full":
    c.model.preset = "qwen2.5-1.5b"  # the shape when no init_from is given
    c.model.dtype, c.model.param_dtype = "bfloat16", "float32"
    c.rollout.num_tasks, c.rollout.group_size = 16, 8
    c.rollout.max_action_tokens = 128
    c.rollout.temperature = 1.0
    c.loss.kl_coef, c.loss.kl_type = 0.01, "low_var_kl"
  return c
