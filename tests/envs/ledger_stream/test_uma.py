"""End to end: LedgerStream -> compiled rollout (windowed history, window_turns=0) -> `uma`
credit. Checks UMA's rule (ALGORITHMS.md §4.2) on what the kernel computes: each memory
turn's score is the mean QA reward of its episode plus its own (tool) reward, memory turns of
a task form one group and each question index its own group, and each QA sample's context
is the prompt plus (final bank, question q) only: a branch from the final memory state."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl import credit
from agent_rl.data.scripted import encode_plans, scripted_policy
from agent_rl.envs.ledger_stream import LedgerStream
from agent_rl.rollout.compiled import rollout
from agent_rl.rollout.episode import EpisodeConfig
from agent_rl.rollout.layout import chat_pieces
from agent_rl.rollout.sampler import SamplerConfig
from agent_rl.tokenizers import ByteTokenizer
from ledger_stream.common import SMALL, row

TOK = ByteTokenizer()
G, TASKS, A = 3, 2, 112


def uma_reference(reward, valid, q, group_id, eps=1e-6):
  """UMA's rows as dict loops: memory rows score mean(QA outcomes) + own reward; groups are
  (task, 0) for memory rows and (task, q) for QA rows; GRPO with Bessel std per group."""
  n, t = reward.shape
  score, groups = {}, {}
  for i in range(n):
    qa = [reward[i, j] for j in range(t) if valid[i, j] and q[i, j] > 0]
    mean_qa = sum(qa) / len(qa) if qa else 0.0
    for j in range(t):
      if valid[i, j]:
        score[i, j] = reward[i, j] if q[i, j] > 0 else mean_qa + reward[i, j]
        groups.setdefault((group_id[i], q[i, j]), []).append((i, j))
  adv = np.zeros((n, t))
  for members in groups.values():
    s = np.array([score[m] for m in members])
    if len(s) == 1:
      adv[members[0]] = s[0]
      continue
    std = s.std(ddof=1)
    for m, v in zip(members, s):
      adv[m] = (v - s.mean()) / (std + eps)
  return adv, score


def ledger_batch(history: str):
  """G scripted rollouts of each of TASKS tasks (expert, stale bank + a wrong answer, a failing
  op + another wrong answer), through the compiled rollout."""
  env = LedgerStream(tokenizer=TOK, **SMALL)
  tasks = jax.vmap(env.sample_task)(jax.random.split(jax.random.key(7), TASKS))
  t_max = env.num_turns
  plans = [p for i in range(TASKS) for p in member_plans(env, row(tasks, i))]
  forced = jnp.asarray(encode_plans(TOK, plans, t_max, A, fmt="{}"))
  end = TOK.special("<|im_end|>")
  cfg = EpisodeConfig(sampler=SamplerConfig(greedy=True, max_tokens=A, stop_tokens=(end,)),
                      max_turns=t_max, group_size=1, history=history, window_turns=0)
  # group_size 1 over G copies of each task = G rollouts of one task (ids regrouped below).
  rep = jax.tree.map(lambda x: jnp.repeat(x, G, axis=0), tasks)
  batch, _ = rollout(scripted_policy(TOK.vocab_size), forced, env, rep, jax.random.key(0), cfg,
                     chat_pieces(TOK, env.instruction))
  return env, batch.replace(group_id=jnp.repeat(jnp.arange(TASKS, dtype=jnp.int32), G))


def member_plans(env, task):
  """Expert, stale bank + a wrong answer to question 1, failing op + a wrong answer to 2."""
  c = env.num_chunks
  plan = env.solve(task)
  stale = plan[:c - 1] + ["<memory> noop </memory>", "<answer> nobody </answer>"] + plan[c + 1:]
  broken = ["<memory> delete 3 </memory>"] + plan[1:c + 1] + ["<answer> -1 </answer>"] + plan[c + 2:]
  return [plan, stale, broken]


def check_uma(env, batch, g):
  """UMA's rule on what the kernel computes, against the dict-loop reference; rows are tasks'
  g rollouts, the first three of each `member_plans`."""
  c = env.num_chunks
  reward, valid = np.asarray(batch.reward), np.asarray(batch.valid)
  q = np.asarray(batch.extras["question_index"])
  assert valid.all()
  np.testing.assert_array_equal(q, np.broadcast_to([0] * c + list(range(1, env.num_questions + 1)),
                                                   q.shape))
  np.testing.assert_allclose(reward[0::g, c:], 1.0)                   # the expert: all right
  assert (reward[1::g, c] == 0).all() and (reward[2::g, c + 1] == 0).all()
  np.testing.assert_allclose(reward[2::g, 0], env.reward_weights[2])  # the tool-error reward
  got = np.asarray(credit.get("uma")(batch).turn)
  want, score = uma_reference(reward, valid, q, np.asarray(batch.group_id))
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  for i in range(reward.shape[0]):                                    # UMA's rule, spelled out
    for j in range(c):
      assert np.isclose(score[i, j], reward[i, c:].mean() + reward[i, j])
  assert np.abs(got[:, :c]).max() > 0 and np.abs(got[:, c:]).max() > 0


def test_env_batch_gives_uma_memory_turns_the_mean_qa_reward():
  """Fast path: env.step replays -> EpisodeBatch (rollout.batch.from_turns with the env's
  info extras) -> uma; the compiled rollout path is the slow test below."""
  from agent_rl.rollout.batch import from_turns
  from ledger_stream.common import make_env, sample, turns, vreset, vstep
  env = make_env()
  tasks = sample(env, 9, 8)                   # 8 rows: tasks 0 and 4, 4 rollouts each
  tasks = jax.tree.map(lambda x: jnp.repeat(x[::4], 4, axis=0), tasks)
  plans = [p for i in (0, 4) for p in member_plans(env, row(tasks, i)) + [env.solve(row(tasks, i))]]
  state, _ = vreset(env, tasks)
  rewards, qs = [], []
  for t in range(env.num_turns):
    state, _, r, _, info = vstep(env, state, turns([p[t] for p in plans]))
    rewards.append(np.asarray(r))
    qs.append(np.asarray(info["question_index"]))
  reward, q = np.stack(rewards, 1), np.stack(qs, 1)
  batch = from_turns(reward, np.ones_like(reward, bool), np.repeat([0, 1], 4),
                     extras={"question_index": q})
  check_uma(env, batch, 4)


@pytest.mark.slow
def test_ledger_rollout_gives_uma_memory_turns_the_mean_qa_reward():
  env, batch = ledger_batch("concatenated")
  check_uma(env, batch, G)


@pytest.mark.slow
def test_windowed_qa_samples_branch_from_the_final_memory():
  """history="windowed", window_turns=0: QA sample q's context is the prompt and QA
  observation q only. (The scripted policy restarts its script with every fresh cache, so
  here every turn replays turn 0's text; the contexts are what this test reads.)"""
  env, batch = ledger_batch("windowed")
  c, seg = env.num_chunks, batch.segment_len
  toks, attn, mask = (np.asarray(x) for x in (batch.tokens, batch.attention_mask, batch.loss_mask))
  for i in range(toks.shape[0]):
    for j in range(c, env.num_turns):
      sl = slice(j * seg, (j + 1) * seg)
      text = TOK.decode(toks[i, sl][attn[i, sl] & (mask[i, sl] == 0)])
      assert text.count("Question ") == 1 and f"Question {j - c + 1}/" in text
      assert "<memory>" not in text.split(env.instruction)[-1]
