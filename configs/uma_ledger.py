"""UMA task-stratified GRPO vs pooled GRPO on LedgerStream, UMA's Ledger-QA memory world
(Zhang et al. 2026, "Learning to Remember: End-to-End Training of Memory Agents for
Long-Context Reasoning", arXiv:2602.18493; code ictnlp/unified-memory-agent; ALGORITHMS.md §4.2).

  python -m agent_rl.train --config=configs/uma_ledger.py:tiny --workdir=/tmp/uma_ledger
  python -m agent_rl.train --config=configs/uma_ledger.py:tiny,grpo --workdir=/tmp/uma_grpo
  variants: grpo (pooled GRPO baseline: one group per task over whole episodes); full.

Method (`credit.name="uma"`, credit/stratified.py): an episode row is C memory turns (one
`<memory>` CRUD call per chunk of the event stream) then Q question turns answered from the
final memory bank. The env reports `question_index` (0 on memory turns, q on QA turn q);
each memory turn scores the mean QA reward of its row plus its own tool reward, and GRPO
normalises the memory turns of a task's rollouts as one group and each question index as its
own group. The history is windowed with `window_turns=0`: every turn sees the prompt and its
own observation only (the bank; the chunk or the question), so the Q QA turns of a row are Q
branches from one final memory state, as in UMA's rollout (envs/ledger_stream/env.py says why
this needs no branching rollout). The baseline `grpo` pools each row's turns into one
episode return, the same advantage on every turn.

Paper setup [recalled from the UMA code (verl agent loop, ray_trainer), not re-checked
against the paper]: n = 16 rollouts a prompt, GRPO std normalisation eps 1e-6, KL in the
reward. `full` keeps 16 rollouts and adds the KL-in-reward term (0.001, our choice of value).
Paper numbers: not retrieved here (the paper's Ledger-QA tables were not reachable from this
machine) [unverified: no number is quoted]. Expected direction: stratified > pooled, because
pooling gives the memory turns of a row the same advantage as its best and worst answers and
normalises memory and QA scores on one scale; stratifying gives the memory calls their own
baseline (UMA's motivation).

tiny (2-core CPU): 3 accounts, 3 chunks of 2 events, 3 questions (6 turns). Regime (issue 22
§2: RL, not the warm start, carries the learning): 60 SFT steps on solver turns (whole
`<memory>` / `<answer>` turns, `env.plan_format`; replayed success 1.00) take held-out reward
from -0.60 to ~0.42 (a QA turn answered right scores 1, so the ceiling is 3) and success (all
three right) to ~0.02, then 30 RL iterations of 8 tasks x 8 (16 x 8 cost ~75 s an iteration
beside another run, ~40 min a run, over the issue's 10-minute tiny; the update of 6 windowed
rows of ~500 tokens per episode is ~3/4 of an iteration; 8 x 8 runs in 14-15 min beside another
run, ~18 s an iteration; alone on the quiet CPU 9 min 32 s, 14 s an iteration, UMA arm). Measured over 3 seeds (2026-12-04,
benchmarks/results/reproduce/uma_ledger.md): **the paper's sign, not significant**: held-out
reward UMA 0.625 +- 0.102 vs pooled GRPO 0.568 +- 0.065, +0.057 [-0.152, +0.267] (both from
0.460 after SFT; RL adds +0.165 vs +0.107); success +0.016 [-0.022, +0.053] (0.052 vs 0.036).
The row:
  python launch/reproduce.py --paper=uma_ledger --scale=tiny --seeds=3
reports `eval/reward` (mean correct answers, less the format and tool-error penalties) and
`eval/success`.
"""
import agent_rl.envs.ledger_stream  # noqa: F401  (registers "ledger_stream")
from agent_rl.eval.reproduce import Comparison
from agent_rl.train.config import scaled_config

VARIANTS = dict(grpo=False)
COMPARISON = Comparison(  # no Ledger-QA numbers were reachable here: direction only
    arms={"UMA": "", "GRPO": "grpo"}, method="UMA", baselines=("GRPO",),
    metrics=("eval/reward", "eval/success"),
    paper_source="UMA (arXiv:2602.18493): task-stratified GRPO over pooled GRPO for memory "
                 "agents [motivation; numbers not retrieved]",
    paper_verified=False, setting="LedgerStream (Ledger-QA-like), 3 chunks, 3 questions")

TINY_ENV = dict(num_accounts=3, num_names=8, num_slots=3, num_chunks=3, chunk_events=2,
                num_questions=3, raw_window=1, max_ops=4, max_arg_bytes=112, max_bytes=160)
FULL_ENV = dict(num_accounts=6, num_names=24, num_slots=8, num_chunks=8, chunk_events=4,
                num_questions=4, raw_window=2, max_ops=8, max_arg_bytes=320, max_bytes=640)


def get_config(arg: str | None = None):
  c, args = scaled_config(arg, VARIANTS)
  c.env.name = "ledger_stream"
  env = TINY_ENV if c.scale == "tiny" else FULL_ENV
  for k, v in env.items():
    c.env.kwargs[k] = v
  c.rollout.max_turns = env["num_chunks"] + env["num_questions"]
  c.rollout.history, c.rollout.window_turns, c.rollout.window_tokens = "windowed", 0, 0
  c.sft.steps = 60 if c.scale == "tiny" else 0  # full: the instruct model is the start
  c.loss.name = "vanilla"
  c.loss.kwargs.clip_ratio_low = c.loss.kwargs.clip_ratio_high = 0.2
  if c.scale == "tiny":
    c.rollout.max_action_tokens = 48  # solver turns: at most 34 tokens (300 tasks), median 8
    c.rollout.num_tasks = 8
    c.tokenizer.vocab_size = 1024
  else:
    c.rollout.max_action_tokens = 256
    c.rollout.num_tasks, c.rollout.group_size = 8, 16
    c.loss.kl_in_reward = 0.001
  if "grpo" in args:
    c.credit.name = "grpo"
  else:
    c.credit.name = "uma"
    c.credit.kwargs.norm_by_std = True
  return c
