"""The loss as a configured list of registered terms.

    total = sum_k coef_k(config) * term_k(inputs)          over the enabled terms of
                                                            config.loss.terms (comma-separated)

A term is one registered function `fn(x: TermInputs, c: ConfigDict) -> (value, metrics)` of a
kind: "loss" (adds coef x value to the total), "advantages" (returns new `[B, L]` advantages
that the later terms see: on-policy distillation's advantage mode) or "weights" (returns
`[B, L]` per-token weights for the policy loss: the sampler importance correction). Terms run
in kind order advantages -> weights -> loss, and in their listed order within a kind.

Adding a term is one function, one test, one config line:

    @register_term("my_term", coef=lambda c: c.loss.my_coef)
    def my_term(x, c):
      return aggregate(x, x.stats.entropy ** 2), {}
    # config:  c.loss.terms = "policy,entropy,my_term";  c.loss.my_coef = 0.1

Micro-batches (`train.microbatches`, gradient accumulation in `train.step`): the step passes
the whole minibatch's loss-mask counts (`losses.Counts`) and each term aggregates a slice with
them (`aggregate`; a term of your own must aggregate with it, not `losses.agg_loss`, or it
counts k times), so the slices' losses sum to the whole minibatch's loss and the update is
the whole minibatch's (ALGORITHMS.md §1.10: global counts, as verl 0.9.1's `agg_loss`), not a
reweighting toward slices with fewer tokens. Term values depending on batch statistics beyond
these counts stay a slice's own (clip_cov / kl_cov's centering and top-k, KTO's reference
point, the sft term's positive-advantage count: weighted by the slice's token share), as in
verl's micro-batches. Metrics are the slices' own values (their mean is reported).

A term whose coefficient is 0 (or whose `enabled(c)` is False, e.g. `value` without a critic)
is not computed. A term that needs a minibatch field (`needs`) the batch lacks fails at trace
time naming the term and the field, before anything runs.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp

from agent_rl import losses
from agent_rl.objective.minibatch import Minibatch
from agent_rl.registry import Registry

KINDS = ("advantages", "weights", "loss")


class TermInputs(NamedTuple):
  """What a term sees. stats: the current policy's `logprobs`, `entropy` (`[B, L]`) and
  `values` (`[B, L]` or None) on the minibatch; mask: loss mask `[B, L]` f32; advantages:
  `[B, L]` after the advantage terms; weights: `[B, L]` policy-loss weights or None; agg: the
  loss aggregation mode; key: PRNG key of this step; scale: C of `seq-mean-token-sum-norm`
  (the rows' full length when the learner cut them, `train.buckets`; None: their length)."""
  stats: Any
  mb: Minibatch
  mask: jax.Array
  advantages: jax.Array
  weights: Optional[jax.Array]
  agg: str
  key: jax.Array
  scale: Optional[int] = None
  counts: Optional[losses.Counts] = None


def count_kwargs(x: TermInputs) -> dict:
  """agg_loss's count kwargs: the minibatch's when x is a micro-batch of it, else none."""
  return {} if x.counts is None else x.counts.agg()


def aggregate(x: TermInputs, loss_mat: jax.Array) -> jax.Array:
  """`losses.agg_loss` of a `[B, L]` per-token loss over the loss mask, in the run's mode,
  with the minibatch's counts when x is a micro-batch (module docstring)."""
  return losses.agg_loss(loss_mat, x.mask, x.agg, scale=x.scale, **count_kwargs(x))


def share(x: TermInputs, unit: str = "tokens"):
  """The rows' share of the minibatch's loss tokens, non-empty rows ("seqs"), (row, turn)
  items ("turns") or rows (1 when they are the minibatch): the weight of a term value that
  cannot take the minibatch's counts (the sft term's, DPO / KTO's row means, the
  `losses.local_counts` policy losses)."""
  if x.counts is None:
    return 1.0
  f = f"num_{unit}"
  mine = getattr(losses.mask_counts(x.mask, x.mb.turn_index), f)
  return mine / jnp.maximum(getattr(x.counts, f), 1e-8)


@dataclasses.dataclass(frozen=True)
class Term:
  fn: Callable[[TermInputs, Any], tuple[jax.Array, dict]]
  coef: Callable[[Any], float] = lambda c: 1.0
  kind: Union[str, Callable[[Any], str]] = "loss"
  enabled: Callable[[Any], bool] = lambda c: True
  needs: tuple[str, ...] = ()  # Minibatch fields that must not be None

  def kind_of(self, c) -> str:
    k = self.kind(c) if callable(self.kind) else self.kind
    if k not in KINDS:
      raise ValueError(f"loss term kind must be one of {KINDS}, got {k!r}")
    return k

  def active(self, c) -> bool:
    return bool(self.enabled(c)) and float(self.coef(c)) != 0.0


TERMS = Registry("loss term")


def register_term(name: str, *, coef: Callable[[Any], float] = lambda c: 1.0,
                  kind: Union[str, Callable[[Any], str]] = "loss",
                  enabled: Callable[[Any], bool] = lambda c: True, needs: tuple[str, ...] = ()):
  """Decorator: registers `fn(x: TermInputs, c) -> (value, metrics)` as loss term `name`."""
  def add(fn):
    TERMS.register(name, Term(fn=fn, coef=coef, kind=kind, enabled=enabled, needs=needs))
    return fn
  return add


def term_names(c) -> list[str]:
  """The terms listed in `config.loss.terms`, each checked against the registry."""
  names = [n.strip() for n in str(c.loss.terms).split(",") if n.strip()]
  for n in names:
    if n not in TERMS:
      raise ValueError(f"config.loss.terms: unknown loss term {n!r}; known: "
                       f"{', '.join(TERMS.names())}")
  if len(set(names)) != len(names):
    raise ValueError(f"config.loss.terms: a term is listed twice in {c.loss.terms!r}")
  return names


def build_objective(c) -> Callable:
  """`objective(stats, mb, key, row_length=None, counts=None) -> (total, metrics)` of the
  enabled terms of `config`. row_length: the rows' length before `train.buckets.cut` trimmed
  them, the constant that `seq-mean-token-sum-norm` divides by (None: the minibatch's own
  length). counts: the whole minibatch's `losses.Counts` when mb is a micro-batch of it
  (module docstring); total then aggregates with them, the metrics with mb's own."""
  active = [(n, TERMS.get(n)) for n in term_names(c) if TERMS.get(n).active(c)]
  by_kind = {k: [(n, t) for n, t in active if t.kind_of(c) == k] for k in KINDS}
  coefs = {n: float(t.coef(c)) for n, t in active}
  agg = c.loss.agg_mode

  def loss_terms(x: TermInputs):
    total, metrics = jnp.float32(0.0), {}
    for n, t in by_kind["loss"]:
      v, m = t.fn(x, c)
      metrics.update(m)
      total = total + coefs[n] * v
    return total, metrics

  def objective(stats, mb: Minibatch, key, row_length: Optional[int] = None,
                counts: Optional[losses.Counts] = None):
    x = TermInputs(stats=stats, mb=mb, mask=mb.loss_mask.astype(jnp.float32),
                   advantages=mb.advantages, weights=None, agg=agg, key=key, scale=row_length)
    metrics = {}
    if stats.entropy is not None:  # None: a critic-only update's forward (policy.value_stats)
      metrics["loss/entropy"] = aggregate(x, stats.entropy)
    for n, t in active:
      missing = [f for f in t.needs if getattr(mb, f, None) is None]
      if missing:
        raise ValueError(f"config.loss.terms: term {n!r} needs minibatch field(s) {missing}, "
                         "which this run does not produce")
    for n, t in by_kind["advantages"]:
      adv, m = t.fn(x, c)
      x = x._replace(advantages=adv)
      metrics.update(m)
    for n, t in by_kind["weights"]:
      w, m = t.fn(x, c)
      x = x._replace(weights=w if x.weights is None else x.weights * w)
      metrics.update(m)
    total, m = loss_terms(x)
    metrics.update(m)
    metrics["loss/total"] = total
    if counts is not None:
      # The gradient's loss with the minibatch's counts; the metrics stay the slice's own
      # (the same element-wise terms again, no second forward: XLA shares them).
      total, _ = loss_terms(x._replace(counts=counts))
    return total, metrics

  return objective


# -- the built-in terms ---------------------------------------------------------------------

def _distill_on(c) -> bool:
  return c.distill.coef > 0


@register_term("policy", coef=lambda c: 0.0 if (_distill_on(c) and c.distill.mode == "loss"
                                                and not c.distill.task_advantages) else 1.0)
def policy_term(x: TermInputs, c):
  """The configured policy loss (`config.loss.name`, the losses registry) on the advantages,
  with the sampler importance weights when that term is on."""
  fn = losses.get(c.loss.name)
  local = getattr(fn, "local_counts", None)  # geo_mean, reinforce, sorl: their own counts
  pg, m = fn(x.stats.logprobs, x.mb.old_logprobs, x.advantages, x.mask, loss_agg_mode=x.agg,
             key=x.key, turn_index=x.mb.turn_index, weights=x.weights,
             **({} if local else count_kwargs(x)), **{"scale": x.scale, **dict(c.loss.kwargs)})
  if local:
    pg = share(x, local) * pg
  return pg, {f"loss/{k}": v for k, v in m.items()} | {"loss/policy": pg}


@register_term("entropy", coef=lambda c: -c.loss.entropy_coef)
def entropy_term(x: TermInputs, c):
  """Entropy bonus: total -= entropy_coef x agg(H_t)."""
  return aggregate(x, x.stats.entropy), {}


@register_term("kl", coef=lambda c: c.loss.kl_coef, needs=("ref_logprobs",))
def kl_term(x: TermInputs, c):
  """KL to the frozen reference, the `config.loss.kl_type` estimator (k1/k2/k3, '+' = straight
  through; ALGORITHMS.md §1.8)."""
  kl = aggregate(x, losses.kl_penalty(x.stats.logprobs, x.mb.ref_logprobs, c.loss.kl_type))
  return kl, {"loss/kl_ref": kl}


@register_term("value", coef=lambda c: c.loss.value_coef,
               enabled=lambda c: c.model.critic != "none", needs=("returns", "old_values"))
def value_term(x: TermInputs, c):
  """PPO's clipped value loss on the critic's values (Schulman et al. 2017)."""
  if x.stats.values is None:
    raise ValueError("loss term 'value' needs a critic (config.model.critic)")
  vl, vm = losses.value_loss(x.stats.values, x.mb.returns, x.mb.old_values, x.mask,
                             cliprange_value=c.loss.value_clip, loss_agg_mode=x.agg,
                             scale=x.scale, **count_kwargs(x))
  return vl, {f"loss/{k}": v for k, v in vm.items()} | {"loss/value": vl}


@register_term("distill", coef=lambda c: c.distill.coef, enabled=_distill_on,
               kind=lambda c: "advantages" if c.distill.mode == "advantage" else "loss",
               needs=("teacher_logprobs",))
def distill_term(x: TermInputs, c):
  """On-policy distillation to the teacher's sampled-token log-probs (GKD, Agarwal et al.
  2024, arXiv:2306.13649). mode=loss: the sampled reverse KL, gradient sg(logπ - logπT)∇logπ.
  mode=advantage: adds coef·sg(logπT - logπ_old) per token to the advantages, which the policy
  loss then optimizes with its ratio clipping (Thinking Machines' recipe);
  `task_advantages=False` drops the RL advantages (pure distillation)."""
  gap = losses.reverse_kl_advantage(x.mb.old_logprobs, x.mb.teacher_logprobs, x.mask)
  m = {"distill/reverse_kl": aggregate(x, -gap)}
  if c.distill.mode == "advantage":
    base = x.advantages if c.distill.task_advantages else jnp.zeros_like(x.advantages)
    return base + c.distill.coef * gap, m
  kl, _ = losses.sampled_kl_loss(x.stats.logprobs, x.mb.teacher_logprobs, x.mask,
                                 direction="reverse", loss_agg_mode=x.agg,
                                 scale=x.scale, **count_kwargs(x))
  return kl, m


@register_term("sft", coef=lambda c: c.loss.sft_coef)
def sft_term(x: TermInputs, c):
  """SFT auxiliary: the NLL of the policy's own tokens that have positive advantage
  (self-imitation of better-than-baseline samples: Oh et al. 2018; RAFT / ReST's filtered
  SFT), added to the RL loss. Its count is of the positive-advantage tokens, which the
  minibatch's counts do not hold: a micro-batch's value is weighted by its token share."""
  keep = x.mask * (x.advantages > 0)
  loss, _ = losses.sft_loss(x.stats.logprobs, keep, loss_agg_mode=x.agg, scale=x.scale)
  return share(x) * loss, {"loss/sft_aux": loss}


@register_term("is_correction", kind="weights", coef=lambda c: c.loss.is_cap,
               needs=("sample_logprobs",))
def is_correction_term(x: TermInputs, c):
  """Sampler importance correction (truncated IS, TIS: Yao et al. 2025; verl's rollout
  correction): the rollout samples from a modified distribution q (temperature / top-k /
  top-p, `sample_logprobs`) while PPO's old policy is the raw π_old (`old_logprobs`); the
  policy loss is reweighted per token by w = min(π_old / q, cap) (`loss.is_level="token"`) or
  per turn-sequence by min(Π_t π_old / q, cap) (`"sequence"`), with no gradient."""
  log_w = (x.mb.old_logprobs - x.mb.sample_logprobs) * x.mask
  if c.loss.is_level == "sequence":
    log_w = jnp.broadcast_to(jnp.sum(log_w, axis=1, keepdims=True), log_w.shape)
  raw = jnp.exp(log_w)
  w = jax.lax.stop_gradient(jnp.minimum(raw, c.loss.is_cap))
  n = jnp.maximum(jnp.sum(x.mask), 1.0)
  return w, {"loss/is_weight_mean": jnp.sum(w * x.mask) / n,
             "loss/is_clipfrac": jnp.sum((raw > c.loss.is_cap) * x.mask) / n}
