"""On-policy distillation in the learner, and weights from elsewhere (`init_from`).

The loss terms are checked against a NumPy reference of their value and gradient with
respect to the logits; the end-to-end test distills a random student into an SFT'd teacher
run and checks the reverse KL on the student's own samples falls.
"""
import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl.objective import Minibatch, build_objective
from agent_rl.parallel.placement import make_placement
from agent_rl.train import pretrained
from agent_rl.train.policy import TokenStats
from agent_rl.train.run import run
from tests.train.tiny import tiny_config


def _softmax(z):
  e = np.exp(z - z.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)


def _case(seed=0, b=3, l=6, v=5):
  rng = np.random.default_rng(seed)
  logits = rng.normal(size=(b, l, v)).astype(np.float32)
  tokens = rng.integers(0, v, size=(b, l)).astype(np.int32)
  mask = (rng.random((b, l)) < 0.7).astype(np.float32)
  mask[:, 0] = 0
  teacher = np.log(rng.dirichlet(np.ones(v), size=(b, l))).astype(np.float32)
  t_lp = np.take_along_axis(teacher, tokens[..., None], -1)[..., 0]
  return logits, tokens, mask, t_lp


def _np_logprobs(logits, tokens):
  """lp[:, t] = log softmax(logits[:, t-1])[tokens[:, t]]; also d lp / d logits as one-hots."""
  p = _softmax(logits[:, :-1])
  lp = np.log(np.take_along_axis(p, tokens[:, 1:, None], -1)[..., 0])
  onehot = np.eye(logits.shape[-1])[tokens[:, 1:]]
  return np.pad(lp, ((0, 0), (1, 0))), onehot - p


def _loss_and_grad(logits, tokens, mask, t_lp, old_lp, adv, distill):
  c = tiny_config()
  c.loss.name, c.loss.agg_mode, c.loss.value_coef = "vanilla", "token-mean", 0.0
  c.distill.update(distill)
  objective = build_objective(c)

  def fn(logits, mb, key):  # the "policy" is the logits themselves
    lp = jnp.take_along_axis(jax.nn.log_softmax(logits[:, :-1]), mb.tokens[:, 1:, None], -1)[..., 0]
    lp = jnp.pad(lp, ((0, 0), (1, 0)))
    return objective(TokenStats(lp, jnp.zeros_like(lp), None), mb, key)
  mb = Minibatch(tokens=jnp.asarray(tokens), position=jnp.zeros_like(tokens),
                 attention_mask=jnp.ones(tokens.shape, bool), loss_mask=jnp.asarray(mask),
                 turn_index=jnp.zeros_like(tokens), old_logprobs=jnp.asarray(old_lp),
                 advantages=jnp.asarray(adv), teacher_logprobs=jnp.asarray(t_lp))
  (loss, m), g = jax.value_and_grad(fn, has_aux=True)(jnp.asarray(logits), mb, jax.random.key(0))
  return float(loss), np.asarray(g), m


def _grad_of_weighted_lp(w, dlp):
  """d/dlogits of sum_t w_t lp_t, with lp_t a function of logits[:, t-1]."""
  g = np.zeros(dlp.shape[:1] + (dlp.shape[1] + 1,) + dlp.shape[2:])
  g[:, :-1] = w[:, 1:, None] * dlp
  return g


@pytest.mark.parametrize("task", [True, False])
def test_reverse_kl_loss_value_and_gradient(task):
  logits, tokens, mask, t_lp = _case()
  lp, dlp = _np_logprobs(logits, tokens)
  adv = np.random.default_rng(1).normal(size=mask.shape).astype(np.float32)
  coef, n = 0.7, mask.sum()
  loss, g, m = _loss_and_grad(logits, tokens, mask, t_lp, lp, adv,
                              dict(coef=coef, mode="loss", task_advantages=task))
  d = (lp - t_lp) * mask
  # on-policy (old = current): the vanilla PPO loss is -mean(A) with gradient -A/n . dlp
  want = coef * d.sum() / n + (-(adv * mask).sum() / n if task else 0.0)
  w = coef * d / n - (adv * mask / n if task else 0.0)
  np.testing.assert_allclose(loss, want, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(g, _grad_of_weighted_lp(w, dlp), rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(float(m["distill/reverse_kl"]), d.sum() / n, rtol=1e-5)


def test_reverse_kl_as_advantage():
  logits, tokens, mask, t_lp = _case(seed=2)
  lp, dlp = _np_logprobs(logits, tokens)
  adv = np.random.default_rng(3).normal(size=mask.shape).astype(np.float32)
  coef, n = 0.5, mask.sum()
  loss, g, _ = _loss_and_grad(logits, tokens, mask, t_lp, lp, adv,
                              dict(coef=coef, mode="advantage", task_advantages=True))
  a = (adv + coef * (t_lp - lp)) * mask
  np.testing.assert_allclose(loss, -a.sum() / n, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(g, _grad_of_weighted_lp(-a / n, dlp), rtol=1e-4, atol=1e-6)


def _records(wd):
  with open(os.path.join(wd, "metrics.jsonl")) as f:
    return [json.loads(ln) for ln in f]


# CI budget (~160 s): the distillation loss has its reference tests (tests/losses) and the
# teacher restore stays in CI (test_init_from_run_and_hf).
@pytest.mark.slow
def test_distillation_run_lowers_reverse_kl_to_teacher(tmp_path):
  teacher = str(tmp_path / "teacher")
  t = tiny_config(iterations=0, sft_steps=100)
  t.sft.lr = 3e-3
  run(t, teacher)  # an SFT'd, peaked policy: a random student's tokens are unlikely under it
  # SFT warm start (fewer steps, another seed), then pure distillation (no task reward) with
  # the sampled reverse-KL loss: the pipeline of on-policy distillation papers. The teacher is
  # a weak, high-entropy policy, so the reverse KL has a floor well above 0; the test asks for
  # a clear fall toward it.
  c = tiny_config(iterations=6, ckpt_every=6, sft_steps=20)
  c.seed, c.sft.lr = 1, 3e-3
  c.rollout.num_tasks, c.rollout.group_size, c.train.minibatch_episodes = 8, 4, 16
  c.train.epochs, c.optim.lr = 2, 3e-3
  c.distill.teacher, c.distill.coef = teacher, 1.0
  c.distill.mode, c.distill.task_advantages = "loss", False
  student = str(tmp_path / "student")
  run(c, student)
  kl = [r["distill/reverse_kl"] for r in _records(student) if "distill/reverse_kl" in r]
  assert len(kl) == 6 and sum(kl[-2:]) < 0.9 * sum(kl[:2]), kl
  with open(os.path.join(student, "config.json")) as f:  # the teacher's tokenizer
    assert json.load(f)["tokenizer"]["path"] == os.path.join(teacher, "tokenizer.model")


def test_init_from_run_and_hf(tmp_path):
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  src = str(tmp_path / "src")
  run(tiny_config(iterations=0, sft_steps=2), src)
  c = tiny_config()
  c.tokenizer.path = os.path.join(src, "tokenizer.model")
  place = make_placement(c.mesh)
  with place.context():
    mcfg, _, want, _, _ = pretrained.load_run_policy(src, 400, place)
    c.model.init_from = src
    got = pretrained.init_from(c, mcfg, place)
    jax.tree.map(np.testing.assert_array_equal, got, want)

    hf = transformers.Qwen2Config(
        vocab_size=mcfg.vocab_size, hidden_size=mcfg.hidden, num_hidden_layers=mcfg.num_layers,
        num_attention_heads=mcfg.num_heads, num_key_value_heads=mcfg.num_kv_heads,
        intermediate_size=mcfg.intermediate, rope_theta=mcfg.rope_theta, rms_norm_eps=mcfg.rms_eps,
        tie_word_embeddings=mcfg.tie_embeddings, max_position_embeddings=256)
    torch.manual_seed(0)
    path = str(tmp_path / "hf")
    transformers.Qwen2ForCausalLM(hf).save_pretrained(path)
    c.model.init_from = path
    params = pretrained.init_from(c, mcfg, place)
    emb = transformers.Qwen2ForCausalLM.from_pretrained(path).model.embed_tokens.weight
    np.testing.assert_allclose(np.asarray(params["embed"]["embedding"][...]),
                               emb.detach().numpy(), rtol=0, atol=0)
    # How this run computes (remat, prefill chunks) is not the model: both sources load.
    other = dataclasses.replace(mcfg, remat="block", prefill_chunk=mcfg.prefill_chunk + 1)
    jax.tree.map(np.testing.assert_array_equal, pretrained.init_from(c, other, place), params)
    c.model.init_from = src
    jax.tree.map(np.testing.assert_array_equal, pretrained.init_from(c, other, place), want)
    c.model.init_from = path
    hf.intermediate_size = 2 * mcfg.intermediate
    transformers.Qwen2ForCausalLM(hf).save_pretrained(path)
    with pytest.raises(ValueError, match="intermediate=128"):
      pretrained.init_from(c, mcfg, place)


def test_interventions_and_branches_in_a_run_and_their_settings(tmp_path):
  """FutureBridge-OPD's pieces in a run: a bigger teacher run, then a student with windowed
  history, distillation, teacher interventions and branched groups: the teacher takes over
  some turns (rollout/teacher_turns), groups branch, the loss is finite; bad settings name
  `distill.intervene`."""
  from agent_rl.train.config import validate
  teacher = str(tmp_path / "teacher")
  t = tiny_config(iterations=0, sft_steps=20)
  t.model.hidden, t.model.num_layers, t.model.intermediate = 48, 2, 96
  run(t, teacher)
  c = tiny_config(iterations=2, ckpt_every=2)
  c.rollout.history, c.rollout.window_turns, c.rollout.max_turns = "windowed", 1, 3
  c.rollout.group_size = 3
  c.rollout.strategy, c.rollout.strategy_kwargs = "branch", {"min_turn": 1, "max_turn": 2}
  c.distill.teacher, c.distill.coef, c.distill.intervene = teacher, 1.0, 0.05
  student = str(tmp_path / "student")
  run(c, student)
  recs = [r for r in _records(student) if "rollout/teacher_turns" in r]
  assert len(recs) == 2 and sum(r["rollout/teacher_turns"] for r in recs) > 0
  assert all(np.isfinite(r["loss/total"]) for r in recs)
  assert sum(r["rollout/branched_episodes"] for r in recs) > 0
  bad = tiny_config()
  bad.distill.teacher, bad.distill.intervene = teacher, 0.5
  with pytest.raises(ValueError, match=r"distill.intervene.*windowed"):
    validate(bad)  # concatenated history
  bad.distill.teacher = ""
  with pytest.raises(ValueError, match=r"distill.teacher.*intervene > 0 needs a teacher"):
    validate(bad)
