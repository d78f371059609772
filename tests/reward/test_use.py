"""A reward model inside RL: the `reward_model` shaper against NumPy for each use (add,
replace, process), its side-by-side metrics and reward-hacking signal, the scores attached at
the right turns, and the start-up errors (fields, env without step labels, tokenizer)."""
import numpy as np
import pytest
from flax import nnx

from agent_rl.objective import shapers
from agent_rl.objective.rm_shaper import MODEL_USES, RM_OUTCOME, RM_TURNS
from agent_rl.reward.config import USES
from agent_rl.reward.model import score_batch
from agent_rl.reward.use import RewardSource, check_tokenizer
from agent_rl.rollout.batch import from_turns
from agent_rl.train.config import base_config, validate
from tests.reward.test_model import CFG, _batch, _model


def _case(seed=0):
  r = np.random.default_rng(seed)
  valid = np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]], bool)
  env = r.normal(size=(4, 3)) * valid
  out = np.zeros((4, 3))
  last = valid.sum(1) - 1
  out[np.arange(4), last] = r.normal(size=4)
  turns = r.normal(size=(4, 3)) * valid
  success = np.zeros((4, 3), bool)
  success[0, 2] = success[2, 0] = True
  b = from_turns(env, valid, np.arange(4) // 2, success=success,
                 extras={RM_OUTCOME: out.astype(np.float32), RM_TURNS: turns.astype(np.float32)})
  return b, env, out, turns, valid


def _cfg(use, a=0.5, b=2.0):
  c = base_config()
  c.reward.model, c.reward.shapers, c.reward.model_use = "rm", "reward_model", use
  c.reward.model_coef, c.reward.env_coef = a, b
  return c


@pytest.mark.parametrize("use", ["add", "replace", "process"])
def test_shaper_matches_numpy(use):
  batch, env, out, turns, valid = _case()
  got, m, st = shapers.apply_shapers(_cfg(use), batch, {})
  want = {"add": 2.0 * env + 0.5 * out, "replace": 0.5 * out,
          "process": 2.0 * env + 0.5 * turns}[use] * valid
  np.testing.assert_allclose(np.asarray(got.reward), want, atol=1e-6)
  er, rr = env.sum(1), out.sum(1)
  assert float(m["rollout/env_reward"]) == pytest.approx(er.mean(), abs=1e-6)
  assert float(m["rollout/rm_reward"]) == pytest.approx(rr.mean(), abs=1e-6)
  assert float(m["rollout/rm_env_corr"]) == pytest.approx(np.corrcoef(er, rr)[0, 1], abs=1e-5)
  assert st["rm_success_ema"] == pytest.approx(0.5) and m["rm/hacking"] == 0.0


def test_hacking_signal_rm_up_env_success_down():
  batch, env, out, turns, valid = _case()
  c = _cfg("add")
  state, flags = {}, []
  last = np.arange(3)[None, :] == (valid.sum(1) - 1)[:, None]
  for it in range(6):  # the RM outcome rises by 1 an iteration while successes vanish
    b = batch.replace(extras={RM_OUTCOME: np.asarray(out + it * last, np.float32),
                              RM_TURNS: batch.extras[RM_TURNS]},
                      success=batch.success & (it == 0))
    _, m, state = shapers.apply_shapers(c, b, state)
    flags.append(m["rm/hacking"])
  assert flags[0] == 0.0 and flags[-1] == 1.0
  # EMA by hand: success 0.5 then 0 each iteration at rate 0.8.
  ema = 0.5
  for _ in range(5):
    ema = 0.8 * ema
  assert state["rm_success_ema"] == pytest.approx(ema) and state["rm_success_start"] == 0.5


def test_shaper_without_scores_names_the_field():
  batch, *_ = _case()
  with pytest.raises(ValueError, match=r"'reward_model' needs batch.extras \['rm/outcome', 'rm/turns'\]"):
    shapers.apply_shapers(_cfg("add"), batch.replace(extras={}), {})


def test_attach_puts_outcome_on_the_last_valid_turn():
  model = _model()
  g, p = nnx.split(model)
  batch = _batch(seed=4)
  src = RewardSource("rm", "outcome", g, p, 0)
  s = score_batch(g, p, batch)
  out = np.asarray(src.attach(batch).extras[RM_OUTCOME])
  v = np.asarray(batch.valid)
  for i in range(v.shape[0]):
    last = v[i].sum() - 1
    assert out[i, last] == pytest.approx(float(s.outcome[i]))
    assert not np.delete(out[i], last).any()


def test_uses_registry_matches_config():
  assert sorted(USES) == MODEL_USES.names()


@pytest.mark.parametrize("field,value,match", [
    ("rm.kind", "q", "config.rm.kind: must be outcome|process"),
    ("reward.model_use", "mul", "config.reward.model_use"),
    ("rm.source", "pairs", "config.rm.pairs_path: source=pairs needs a JSONL"),
    ("reward.model", "/nonexistent_rm", "config.reward.model: '/nonexistent_rm' is not a reward-model run"),
    ("rm.policy_run", "/nonexistent_p", "config.rm.policy_run"),
])
def test_bad_fields_fail_at_start_up(field, value, match):
  c = base_config()
  blk, f = field.split(".")
  c[blk][f] = value
  with pytest.raises(ValueError, match=match):
    validate(c)


def test_prm_on_env_without_step_labels_names_the_env():
  c = base_config()
  c.env.name, c.rm.kind = "bandit", "process"
  with pytest.raises(ValueError, match=r"config.rm.kind: .*env 'bandit' emits none; envs with step labels: sokoban"):
    validate(c)


def test_rm_workdir_needs_its_shaper(tmp_path):
  (tmp_path / "config.json").write_text("{}")
  c = base_config()
  c.reward.model = str(tmp_path)
  with pytest.raises(ValueError, match="config.reward.shapers: reward.model is set but"):
    validate(c)


class _Tok:
  def __init__(self, v, shift=0):
    self.vocab_size, self.shift = v, shift

  def encode(self, text):
    return [ord(ch) + self.shift for ch in text]


def test_tokenizer_mismatch_names_the_run():
  check_tokenizer("runs/rm", _Tok(300), _Tok(300), "push the box")
  with pytest.raises(ValueError, match=r"reward-model run runs/rm reads another tokenizer \(vocabulary 500, the policy's 300"):
    check_tokenizer("runs/rm", _Tok(500), _Tok(300), "push")
  with pytest.raises(ValueError, match="different ids for the env instruction"):
    check_tokenizer("runs/rm", _Tok(300, 1), _Tok(300), "push")


def test_offline_and_rm_runs_refuse_each_others_kinds(tmp_path):
  from agent_rl.reward.offline import check_term, train_preference_policy
  from agent_rl.reward.train import train_reward_model
  c = base_config()
  c.rm.kind = "dpo"
  with pytest.raises(ValueError, match="config.rm.kind: a reward-model run trains outcome|process"):
    train_reward_model(c, str(tmp_path))
  with pytest.raises(ValueError, match=r"config.loss.terms: rm.kind='dpo' trains with the 'dpo' loss term"):
    check_term(c)
  c.loss.terms = "dpo"
  with pytest.raises(ValueError, match="loss.term_kwargs.dpo"):  # listed, coefficient 0
    check_term(c)
  c.loss.term_kwargs.dpo = 1.0
  check_term(c)
  c.rm.kind = "outcome"
  with pytest.raises(ValueError, match="config.rm.kind: the offline preference run trains dpo|kto"):
    train_preference_policy(c, str(tmp_path))
