"""CalcMath with two roles, a solver and a verifier (registers "calc_math_verify").

The math setting of Dr. MAS (Feng et al. 2026, arXiv:2602.08847, langfengQ/DrMAS): a solver
agent and a verifier agent whose rewards have deliberately different scales, so one global
GRPO baseline fits neither agent's reward distribution (their case for per-agent advantage
normalization). Problems, calculator, tool format and rendering are calc_math's (problem.py,
calc.py, `CalcMath.fmt`); this module adds the turn order and the per-role rewards.

Roles (`roles`, agent ids 0 and 1; the solver acts first, `first_agent`):
  solver    plays CalcMath turns: `<calc> 412 + 97 </calc>` (answered in its next observation)
            or `<answer> 506 </answer>` (an integer). A valid answer is a *proposal*: the
            verifier acts next.
  verifier  sees its role line, the problem, the solver's successful calculator results so far
            (values only, which it may trust or not) and the proposed answer. It may call the
            calculator (`<calc>`, answered in its next observation) and ends its turns with
            `<verdict> accept </verdict>` or `<verdict> reject </verdict>` (ASCII case ignored).
  accept    the episode ends (success = the accepted answer is correct).
  reject    the solver acts again, its observation saying "the verifier rejected <n>"; after
            `max_rounds` proposals (default 2) a reject ends the episode.
Invalid turns (no tag, unclosed or empty tag, argument over `max_expr_bytes`, a non-integer
answer, a verdict other than accept / reject, a tag of the other role) are the acting role's
invalid action: the tool layer's error message is its next observation and it keeps the turn,
as an invalid CalcMath turn does (a garbled verdict is not a reject: the verifier is told what
was wrong). Failed calls (calculator errors, injected faults, budget) also keep the turn.
Limits: `max_turns` turns of both roles together (base.step_limit; `truncated`); each role has
its own budget of `max_calls` calculator calls (the verifier's re-computation never spends the
solver's budget). Faults are drawn from the episode key and the global turn (calc.fault_draws).

Observations are the next actor's view: its role line, then the feedback of the last turn
(a calculator result, an error message, "the verifier rejected <n>"), then the problem block
when the role sees the round for the first time (the solver at reset, the verifier after each
proposal) or always with `repeat_problem` (the verifier's block also holds results + proposal).

Reward terms (`reward_names` = `role_reward_terms` = ("solver", "verifier"); weights 1, so the
scalar reward is their sum). Each term is that role's whole reward at the step:
  solver    solver_scale (1.0) x [this step accepts a correct answer] (at the verifier's
            step); on the solver's own turns CalcMath's shaping folded in: format_reward (0.1)
            x [a well-formed wrong answer] + invalid_penalty (-0.1) x [invalid turn]
            + tool_error_penalty (0) x [failed call]. A correct answer that is rejected
            earns nothing: the solver is paid for answers the verifier lets through.
  verifier  verifier_scale (0.2) x [verdict right: accept a correct / reject a wrong answer]
            + verifier_invalid_penalty (-0.02) x [invalid turn] + tool_error_penalty x [failed
            call]; 0 on the solver's turns.
success = the episode ended with an accepted correct answer.
Info beyond the fixed keys: agent_id, next_agent (unchanged on the last step), truncated, the tool layer's tool_call,
tool_error, answered (the acting role's final tag was valid: a proposal or a verdict), fatal,
verdict (-1 none, 0 reject, 1 accept) and verdict_correct.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.envs.base import ENVS, Text, TokenizerLike, fingerprint, step_limit
from agent_rl.envs.byte_scan import match_words, parse_ints
from agent_rl.envs.calc_math import calc
from agent_rl.envs.calc_math import problem as P
from agent_rl.envs.calc_math.env import CalcMath
from agent_rl.envs.calc_math.problem import CalcTask
from agent_rl.envs.render import PieceTable
from agent_rl.envs.tools import errors as E
from agent_rl.envs.tools.format import ToolFormat
from agent_rl.envs.tools.text import concat

VERDICT_WORD = E.register_error("verdict_word", "<{tag}> must be accept or reject")
ROLES = ("solver", "verifier")
SOLVER, VERIFIER = 0, 1
VERDICTS = (b"reject", b"accept")                   # index = the `verdict` info value
ROLE_LINES = ("You are the solver: solve the problem; a verifier checks your answer.",
              "You are the verifier: check the solver's answer, then accept or reject it.")
RESULTS, NONE, ANSWER, REJECTED = ("\nThe solver's calculator results:", " none",
                                   ".\nThe solver's answer: ", "the verifier rejected ")
_FORMAT_ERRORS = (E.NO_CALL, E.UNCLOSED, E.EMPTY, E.TOO_LONG, calc.NOT_INT, VERDICT_WORD)


@struct.dataclass
class CalcVerifyState:
  """task; key: raw episode key (faults); turn: int32 turns of both roles; agent: int32 who
  acts next; calls: [2] int32 calculator calls per role; rounds: int32 proposals so far;
  proposed: int32 the pending proposal; res_num, res_den: [max_calls] int32 the solver's
  successful results, n_res of them; hits: [S] bool gold values the solver computed;
  solved, done: bool."""
  task: CalcTask
  key: jax.Array
  turn: jax.Array
  agent: jax.Array
  calls: jax.Array
  rounds: jax.Array
  proposed: jax.Array
  res_num: jax.Array
  res_den: jax.Array
  n_res: jax.Array
  hits: jax.Array
  solved: jax.Array
  done: jax.Array


@ENVS.register("calc_math_verify")
@dataclasses.dataclass(frozen=True)
class CalcMathVerify:
  """Solver/verifier CalcMath (see the module docstring); generator fields as CalcMath's."""
  tokenizer: TokenizerLike = dataclasses.field(compare=False, hash=False, repr=False)
  min_steps: int = 2
  max_steps: int = 4
  min_digits: int = 1
  max_digits: int = 3
  max_factor: int = 9
  max_value: int = 999_999_999
  max_turns: int = 12
  max_calls: int = 6
  max_rounds: int = 2
  fault_rate: float = 0.0
  busy_rate: float = 0.0
  fatal: tuple = ("calc_fault",)
  solver_scale: float = 1.0
  verifier_scale: float = 0.2
  format_reward: float = 0.1
  invalid_penalty: float = -0.1
  verifier_invalid_penalty: float = -0.02   # calc_math's -0.1 at the verifier's 0.2 scale
  tool_error_penalty: float = 0.0
  max_expr_bytes: int = 64
  max_bytes: int = 256
  repeat_problem: bool = False
  base: CalcMath = dataclasses.field(init=False, repr=False)
  verifier_fmt: ToolFormat = dataclasses.field(init=False, repr=False)
  pieces: PieceTable = dataclasses.field(init=False, repr=False)
  obs_len: int = dataclasses.field(init=False)

  roles = ROLES
  role_reward_terms = ROLES
  reward_names = ROLES
  reward_weights = (1.0, 1.0)
  plan_format = "{}"

  def __post_init__(self):
    kind = type(self).__name__
    if self.tokenizer is None:
      raise ValueError(f"{kind} needs tokenizer= (anything with encode/decode/pad_id/byte_table)")
    if int(self.max_rounds) < 1:
      raise ValueError(f"{kind}.max_rounds must be >= 1, got {self.max_rounds}")
    for name in ("solver_scale", "verifier_scale"):
      if not float(getattr(self, name)) > 0.0:
        raise ValueError(f"{kind}.{name} must be > 0, got {getattr(self, name)}")
    # CalcMath validates the shared fields (its errors name them) and owns the solver's format.
    shared = ("min_steps", "max_steps", "min_digits", "max_digits", "max_factor", "max_value",
              "max_turns", "max_calls", "fault_rate", "busy_rate", "fatal", "max_expr_bytes",
              "max_bytes")
    base = CalcMath(tokenizer=self.tokenizer, **{k: getattr(self, k) for k in shared})
    object.__setattr__(self, "base", base)
    object.__setattr__(self, "fatal", base.fatal)
    vfmt = ToolFormat(self.tokenizer, tools=("calc",), answer="verdict",
                      max_arg_bytes=self.max_expr_bytes, max_bytes=self.max_bytes,
                      budget=self.max_calls, fatal=self.fatal,
                      tool_errors=calc.ERRORS + ("verdict_word",))
    object.__setattr__(self, "verifier_fmt", vfmt)
    sfmt = base.fmt
    digits = [str(d) for d in range(10)]
    table = PieceTable(self.tokenizer, list(ROLE_LINES) + [sfmt.result_open, sfmt.result_close,
                                                           "-", "/", " ", ".", "\n", RESULTS, NONE,
                                                           ANSWER, REJECTED] + digits)
    object.__setattr__(self, "pieces", table)
    zero = np.zeros((self.max_calls,), np.int32)
    wrapped = lambda *before: self._slots(
        [(x, True) for x in (sfmt.result_open,) + before] + [((0, 1), True), (sfmt.result_close, True)])
    # At most one feedback part is non-empty (a result, a reject, one role's error message).
    feedback = max(table.max_tokens(wrapped()), table.max_tokens(wrapped(REJECTED)),
                   sfmt.message_len, vfmt.message_len)
    suffix = table.max_tokens(self._slots(self._suffix_items(zero, zero, 0, 0)))
    object.__setattr__(self, "obs_len", int(table.max_tokens([list(ROLE_LINES), ["\n"]])
                                            + feedback + base.problem_len + suffix))

  # -- host side -----------------------------------------------------------------------------
  @property
  def instruction(self) -> str:
    return (self.base.instruction + " A verifier checks each answer: it may call the "
            "calculator the same way and then replies <verdict> accept </verdict> or "
            "<verdict> reject </verdict>; a rejected solver may answer again.")

  def render_text(self, task: CalcTask) -> str:
    """Host-side text of the problem (the solver's first observation after its role line)."""
    return P.problem_text(task)

  def solve(self, task: CalcTask) -> list[str]:
    """The expert plan: CalcMath's (one `<calc>` per event, `<answer>`), then the verifier's
    accept."""
    plan = self.base.solve(task) + ["<verdict> accept </verdict>"]
    if len(plan) > self.max_turns:
      raise ValueError(f"the plan needs {len(plan)} turns; max_turns={self.max_turns}")
    return plan

  # -- jitted side ---------------------------------------------------------------------------
  def sample_task(self, key: jax.Array) -> CalcTask:
    return self.base.sample_task(key)

  def first_agent(self, state: CalcVerifyState) -> jax.Array:
    return state.agent

  def _problem(self, task: CalcTask, show=True) -> Text:
    """"\n" + the problem, empty unless `show`."""
    # CalcMath.reset's observation is the rendered problem (its `_problem` is private).
    obs = self.base.reset(jax.random.key(0), task)[1]
    problem = Text(tokens=obs.tokens[:self.base.problem_len], length=obs.length)
    out_len = self.base.problem_len + self.pieces.max_tokens([["\n"]])
    text = concat([self._text([("\n", True)]), problem], out_len, self.pieces.pad_id)
    return Text(tokens=text.tokens, length=jnp.where(show, text.length, 0))

  def _line(self, agent: jax.Array) -> Text:
    ids = jnp.asarray([self.pieces.id(x) for x in ROLE_LINES], jnp.int32)[agent]
    return self.pieces.render(ids[None], self.pieces.max_tokens([list(ROLE_LINES)]))

  def _slots(self, items) -> list[list[str]]:
    """Host: the pieces each slot of `items` may hold (sizes the rendered text)."""
    digits = [str(d) for d in range(10)]
    value = [["-"]] + [digits] * calc.RESULT_DIGITS + [["/"]] + [digits] * calc.RESULT_DIGITS
    return [s for thing, _ in items for s in ([[thing]] if isinstance(thing, str) else value)]

  def _text(self, items, show=True) -> Text:
    """Renders `items`, a list of (piece str or (num, den) value, shown bool); all hidden
    unless `show`."""
    ids, mask = [], []
    for thing, shown in items:
      if isinstance(thing, str):
        ids.append(jnp.asarray([self.pieces.id(thing)], jnp.int32))
        mask.append(jnp.atleast_1d(jnp.asarray(shown, bool)))
      else:
        i, m = calc.value_pieces(self.pieces, *thing)
        ids.append(i)
        mask.append(m & shown)
    text = self.pieces.render(jnp.concatenate(ids), self.pieces.max_tokens(self._slots(items)),
                              jnp.concatenate(mask))
    return Text(tokens=text.tokens, length=jnp.where(show, text.length, 0))

  def _suffix_items(self, res_num, res_den, n_res, proposed) -> list:
    """The verifier block after the problem: the solver's results, then the proposal."""
    items = [(RESULTS, True)]
    for k in range(self.max_calls):
      items += [(" ", k < n_res), ((res_num[k], res_den[k]), k < n_res)]
    return items + [(NONE, n_res == 0), (ANSWER, True), ((proposed, jnp.int32(1)), True), (".", True)]

  def _wrapped(self, before: tuple[str, ...], num, den, show) -> Text:
    """`<information>` + before + value + `</information>`, empty unless `show`."""
    fmt = self.base.fmt
    items = [(x, True) for x in (fmt.result_open,) + before] + [((num, den), True)]
    return self._text(items + [(fmt.result_close, True)], show)

  def reset(self, key: jax.Array, task: CalcTask) -> tuple[CalcVerifyState, Text]:
    raw = jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else key
    z = jnp.zeros((self.max_calls,), jnp.int32)
    state = CalcVerifyState(task=task, key=raw, turn=jnp.int32(0), agent=jnp.int32(SOLVER),
                            calls=jnp.zeros((2,), jnp.int32), rounds=jnp.int32(0),
                            proposed=jnp.int32(0), res_num=z, res_den=z + 1, n_res=jnp.int32(0),
                            hits=jnp.zeros((self.max_steps,), bool), solved=jnp.bool_(False),
                            done=jnp.bool_(False))
    return state, concat([self._line(state.agent), self._problem(task)], self.obs_len,
                         self.pieces.pad_id)

  def step(self, state: CalcVerifyState, action: Text):
    task, live, agent = state.task, ~state.done, state.agent
    is_v = agent == VERIFIER
    sfmt, vfmt = self.base.fmt, self.verifier_fmt
    # Both formats tag kind 0 = calc, kind 1 = the role's final tag (answer / verdict).
    call = jax.tree.map(lambda s, v: jnp.where(is_v, v, s), sfmt.parse(action), vfmt.parse(action))
    call, used = sfmt.charge(call, state.calls[agent], live)
    ran = (call.kind == 0) & (call.error == E.OK)
    draws = calc.fault_draws(jax.random.wrap_key_data(state.key), state.turn)
    err, res = calc.evaluate(call.arg, call.arg_len, draws, self.fault_rate, self.busy_rate)
    call = call.replace(error=jnp.where(ran, err, call.error))
    calc_ok = live & ran & (err == E.OK)
    final = (call.kind == 1) & (call.error == E.OK)
    value, is_int = parse_ints(call.arg[None], call.arg_len[None])
    arg = jnp.pad(call.arg, (0, max(0, max(map(len, VERDICTS)) - call.arg.shape[0])))
    word = match_words(arg[None], call.arg_len[None], VERDICTS)[0]
    good = jnp.where(is_v, word >= 0, is_int[0])
    bad_code = jnp.where(is_v, VERDICT_WORD, calc.NOT_INT)
    call = call.replace(error=jnp.where(final & ~good, bad_code, call.error).astype(jnp.int32))
    final = live & final & good
    proposal, verdict = final & ~is_v, final & is_v
    accept, reject = verdict & (word == 1), verdict & (word == 0)
    pending_ok = state.proposed == task.answer
    verdict_correct = (accept & pending_ok) | (reject & ~pending_ok)
    format_err = jnp.any(call.error == jnp.asarray(_FORMAT_ERRORS, jnp.int32))
    invalid = live & format_err
    tool_err = live & (call.kind == 0) & (call.error != E.OK) & ~format_err
    wrong = proposal & (value[0] != task.answer)
    f32 = lambda x: x.astype(jnp.float32)
    solver_term = jnp.where(is_v, self.solver_scale * f32(accept & pending_ok),
                            self.format_reward * f32(wrong) + self.invalid_penalty * f32(invalid)
                            + self.tool_error_penalty * f32(tool_err))
    verifier_term = jnp.where(is_v, self.verifier_scale * f32(verdict_correct)
                              + self.verifier_invalid_penalty * f32(invalid)
                              + self.tool_error_penalty * f32(tool_err), 0.0)
    terms = jnp.stack([solver_term, verifier_term]).astype(jnp.float32)
    rounds = state.rounds + proposal.astype(jnp.int32)
    terminated = accept | (reject & (rounds >= self.max_rounds))
    turn, done, truncated = step_limit(state.turn, 1, live, terminated, state.done, self.max_turns)
    keep = calc_ok & ~is_v                                     # a solver result the verifier sees
    slot = jnp.where(keep, state.n_res, self.max_calls)        # out of range: dropped
    gold = (jnp.arange(self.max_steps) < task.num_steps) & (task.values == res.num) & (res.den == 1)
    new = CalcVerifyState(
        task=task, key=state.key, turn=turn,
        agent=jnp.where(proposal, VERIFIER, jnp.where(reject, SOLVER, agent)).astype(jnp.int32),
        calls=state.calls.at[agent].set(used), rounds=rounds,
        proposed=jnp.where(proposal, value[0], state.proposed).astype(jnp.int32),
        res_num=state.res_num.at[slot].set(res.num, mode="drop"),
        res_den=state.res_den.at[slot].set(res.den, mode="drop"),
        n_res=state.n_res + keep.astype(jnp.int32), hits=state.hits | (gold & keep),
        solved=state.solved | (accept & pending_ok), done=done)
    s_info, v_info = sfmt.turn_info(call, live), vfmt.turn_info(call, live)
    info = {k: jnp.where(is_v, v_info[k], s_info[k]) for k in s_info}
    info.update(agent_id=agent, next_agent=new.agent, success=new.solved,
                valid_action=live & ~format_err, state_hash=self.state_hash(new),
                reward_terms=terms, truncated=truncated, verdict_correct=verdict_correct,
                verdict=jnp.where(verdict, word, -1).astype(jnp.int32))
    obs = self._observe(state, new, call, res, calc_ok, reject, proposal)
    reward = jnp.dot(terms, jnp.asarray(self.reward_weights, jnp.float32))
    return new, obs, reward, done, info

  def _observe(self, old, new, call, res, calc_ok, reject, proposal) -> Text:
    """The next actor's view: role line, last turn's feedback, problem block (docstring)."""
    result = self._wrapped((), res.num, res.den, calc_ok)
    rejected = self._wrapped((REJECTED,), old.proposed, jnp.int32(1), reject)
    by_verifier = old.agent == VERIFIER
    msgs = [f.message(call) for f in (self.base.fmt, self.verifier_fmt)]
    msgs = [Text(tokens=m.tokens, length=jnp.where(by_verifier == (k == VERIFIER), m.length, 0))
            for k, m in enumerate(msgs)]
    show = proposal | self.repeat_problem              # proposal: the verifier's new round
    problem = self._problem(old.task, show)
    suffix = self._text(self._suffix_items(new.res_num, new.res_den, new.n_res, new.proposed),
                        show & (new.agent == VERIFIER))
    return concat([self._line(new.agent), result, rejected, *msgs, problem, suffix],
                  self.obs_len, self.pieces.pad_id)

  def progress(self, state: CalcVerifyState) -> jax.Array:
    """f32 share of the gold intermediate values the solver has computed."""
    return jnp.sum(state.hits) / jnp.maximum(state.task.num_steps, 1).astype(jnp.float32)

  def state_hash(self, state: CalcVerifyState) -> jax.Array:
    t = state.task
    return fingerprint(t.name, t.item, t.start, t.num_steps, t.ops, t.operands, state.turn,
                       state.agent, state.calls, state.rounds, state.proposed, state.res_num,
                       state.res_den, state.n_res, state.hits, state.solved, state.done)
