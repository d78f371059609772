"""DPO and KTO as loss terms of the objective, over a minibatch of preference rows.

    --config.loss.terms=dpo --config.loss.term_kwargs.dpo=1.0 [--config.loss.term_kwargs.dpo_beta=0.1]
    --config.loss.terms=kto --config.loss.term_kwargs.kto=1.0 [--config.loss.term_kwargs.kto_beta=0.1]

Rows are completions scored by the current policy (`stats.logprobs`) and by the frozen
reference (`mb.ref_logprobs`); a completion's log-prob is the sum over its `loss_mask` tokens
(`losses.preference.sequence_logprobs`). Both average over rows: a micro-batch's value is
weighted by its share of the minibatch's rows (KTO's reference point stays the slice's own).
  dpo: rows come in (chosen, rejected) pairs, rows 2i / 2i+1 (a minibatch of pairs must be
       drawn pair-wise, never shuffled row by row).
  kto: each row is one completion, desirable when its advantages over its loss tokens sum to
       > 0 (a preference run writes +1 / -1 there).
"""
from __future__ import annotations

import jax.numpy as jnp

from agent_rl.losses import preference
from agent_rl.objective.terms import TermInputs, register_term, share


def _kw(c, name, default):
  return float(c.loss.term_kwargs.get(name, default))


def _seq(x: TermInputs):
  pol = preference.sequence_logprobs(x.stats.logprobs, x.mask)
  ref = preference.sequence_logprobs(x.mb.ref_logprobs, x.mask)
  return pol, ref


@register_term("dpo", coef=lambda c: _kw(c, "dpo", 0.0), needs=("ref_logprobs",))
def dpo_term(x: TermInputs, c):
  """DPO (Rafailov et al. 2023) on (chosen, rejected) row pairs; `term_kwargs.dpo_beta`
  (0.1), `term_kwargs.dpo_label_smoothing` (0)."""
  pol, ref = _seq(x)
  (pc, pr), (rc, rr) = preference.pair_rows(pol), preference.pair_rows(ref)
  loss, m = preference.dpo_loss(pc, pr, rc, rr, beta=_kw(c, "dpo_beta", 0.1),
                                label_smoothing=_kw(c, "dpo_label_smoothing", 0.0))
  return share(x, "rows") * loss, {f"dpo/{k}": v for k, v in m.items()} | {"loss/dpo": loss}


@register_term("kto", coef=lambda c: _kw(c, "kto", 0.0), needs=("ref_logprobs",))
def kto_term(x: TermInputs, c):
  """KTO (Ethayarajh et al. 2024) per row, desirable iff sum(advantages x mask) > 0;
  `term_kwargs.kto_beta` (0.1), `kto_lambda_d` / `kto_lambda_u` (1)."""
  pol, ref = _seq(x)
  desirable = jnp.sum(x.advantages * x.mask, axis=-1) > 0
  loss, m = preference.kto_loss(pol, ref, desirable, beta=_kw(c, "kto_beta", 0.1),
                                lambda_d=_kw(c, "kto_lambda_d", 1.0),
                                lambda_u=_kw(c, "kto_lambda_u", 1.0))
  return share(x, "rows") * loss, {f"kto/{k}": v for k, v in m.items()} | {"loss/kto": loss}
