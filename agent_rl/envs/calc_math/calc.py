"""The calculator tool of CalcMath: `<calc>expr</calc>` evaluated exactly in JAX, with faults.

The expression is parsed and evaluated by `agent_rl.envs.arith` (exact rationals, int32,
never `eval`); its failures become tool errors whose messages the model reads in the
observation (the tool layer's error registry, `agent_rl.envs.tools.errors`):

  calc_syntax   the expression does not parse (arith.SYNTAX)
  calc_div_zero division by a zero value (arith.DIV_ZERO)
  calc_overflow a quantity reached 2**30 (arith.OVERFLOW)
  calc_fault    injected random failure of the tool itself; the env declares it *fatal*
                (info `fatal`, the erroneous-step flag of fatal-aware GRPO), as the
                execution failures CLEANER (Xu et al. 2026, arXiv:2601.15141) and OpenSearch-VL
                see from real sandboxes
  calc_busy     injected transient error message ("try again"): a recoverable error, the
                setting of CLEANER's self-corrections
  answer_not_int  the final answer is not one integer

Faults are drawn from the episode's key folded with the turn index, so the same env key
gives the same faults bit for bit (`fault_draws`). Results render as
`<information>-12/5</information>` (lowest terms; the integer alone when den = 1).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from agent_rl.envs import arith
from agent_rl.envs.render import PieceTable, int_pieces
from agent_rl.envs.tools import errors as E

SYNTAX = E.register_error("calc_syntax", "the expression in <{tag}> does not parse (use integers, "
                          "+ - * / and parentheses)")
DIV_ZERO = E.register_error("calc_div_zero", "division by zero in <{tag}>")
OVERFLOW = E.register_error("calc_overflow", "a number in <{tag}> reached 2**30")
FAULT = E.register_error("calc_fault", "the calculator crashed (internal failure)")
BUSY = E.register_error("calc_busy", "the calculator is busy, try the same call again")
NOT_INT = E.register_error("answer_not_int", "<{tag}> must hold one integer")
ERRORS = ("calc_syntax", "calc_div_zero", "calc_overflow", "calc_fault", "calc_busy", "answer_not_int")
_FROM_ARITH = (E.OK, SYNTAX, DIV_ZERO, OVERFLOW)   # indexed by arith's code
RESULT_DIGITS = len(str(arith.LIMIT - 1))           # |num|, den < 2**30


def calc_error(code: jax.Array) -> jax.Array:
  """arith result code -> tool error code (int32)."""
  return jnp.asarray(_FROM_ARITH, jnp.int32)[jnp.clip(code, 0, 3)]


def fault_draws(key: jax.Array, turn: jax.Array) -> jax.Array:
  """`[2] f32` uniforms of one turn: [0] decides a fatal fault, [1] a transient error."""
  return jax.random.uniform(jax.random.fold_in(key, turn), (2,))


def evaluate(arg: jax.Array, arg_len: jax.Array, draws: jax.Array, fault_rate: float,
             busy_rate: float) -> tuple[jax.Array, arith.ArithResult]:
  """`(error int32, result)` of one calculator call on its argument bytes `arg [B] uint8`.

  An injected fault pre-empts the evaluation (the tool failed before computing), a fatal
  fault pre-empts a transient one; otherwise the error is arith's."""
  res = arith.evaluate(arg, arg_len, max_literals=1)
  fault = draws[0] < fault_rate
  busy = ~fault & (draws[1] < busy_rate)
  err = jnp.where(fault, FAULT, jnp.where(busy, BUSY, calc_error(res.code)))
  return err.astype(jnp.int32), res


def value_pieces(table: PieceTable, num: jax.Array, den: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Piece ids + mask `[2 * RESULT_DIGITS + 2]` of "-num/den" ("/den" only when den != 1)."""
  digit_ids = jnp.asarray([table.id(str(d)) for d in range(10)], jnp.int32)
  n_ids, n_mask = int_pieces(jnp.abs(num), digit_ids, RESULT_DIGITS)
  d_ids, d_mask = int_pieces(den, digit_ids, RESULT_DIGITS)
  frac = den != 1
  ids = jnp.concatenate([jnp.asarray([table.id("-")]), n_ids, jnp.asarray([table.id("/")]), d_ids])
  mask = jnp.concatenate([jnp.atleast_1d(num < 0), n_mask, jnp.atleast_1d(frac), d_mask & frac])
  return ids, mask
