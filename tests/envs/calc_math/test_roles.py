"""Solver/verifier CalcMath (calc_math_verify) vs a plain-Python reference of its role rules,
written from the module docstring of agent_rl/envs/calc_math/roles.py: random action strings
(valid calls, answers, verdicts, garbage) over many episodes with faults on, every step's
per-role rewards, next agent, done and observation text compared; expert plans; jit/vmap;
state hashes; construction errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import arith_reference as ar
from agent_rl import envs
from agent_rl.envs.calc_math import CalcMathVerify, calc
from agent_rl.envs.calc_math import problem as P
from agent_rl.envs.tools import errors as E
import batched
from batched import vreset, vsample, vstep
from calc_math import reference as ref
from conftest import CharTokenizer

TOK = CharTokenizer()
A_LEN = 112
B = 32
# One env config for every test (each config costs a compile of the step on 2 cores).
ENV = CalcMathVerify(tokenizer=TOK, max_steps=3, fault_rate=0.1, busy_rate=0.1, max_turns=10,
                     max_calls=5, max_rounds=2)
LINES = ("You are the solver: solve the problem; a verifier checks your answer.",
         "You are the verifier: check the solver's answer, then accept or reject it.")
TAGS = (("calc", "answer"), ("calc", "verdict"))
INVALID = {"no_call", "unclosed", "empty", "too_long", "answer_not_int", "verdict_word"}
CALC_ERRORS = {ar.SYNTAX: "calc_syntax", ar.DIV_ZERO: "calc_div_zero", ar.OVERFLOW: "calc_overflow"}


def _is_int(arg: bytes) -> bool:
  s = arg.decode("latin-1")
  body = s[1:] if s[:1] in "+-" else s
  return body.isascii() and body.isdigit() and 1 <= len(body) <= 9


def _info(text):
  return f"\n\n<information>{text}</information>\n\n"


class RefEpisode:
  """The role rules of one episode in plain Python; `draws [max_turns, 2]` are the episode's
  fault uniforms (calc.fault_draws of its key and the global turn)."""

  def __init__(self, env, task, draws):
    self.env, self.draws, self.task = env, draws, task
    self.problem, self.answer = P.problem_text(task), int(task.answer)
    self.agent, self.turn, self.calls, self.rounds = 0, 0, [0, 0], 0
    self.proposed, self.results, self.solved, self.done = 0, [], False, False

  def first_obs(self):
    return LINES[0] + "\n" + self.problem

  def step(self, raw: bytes) -> dict:
    e, r = self.env, self.agent
    tags, fmt = TAGS[r], (e.base.fmt, e.verifier_fmt)[r]
    tag, arg = ref.first_call(raw, tags)
    kind = -1 if tag is None else tags.index(tag)
    err, value, verdict = "ok", None, None
    if tag is None:
      err = "no_call"
    elif arg is None:
      err = "unclosed"
    elif not arg:
      err = "empty"
    elif len(arg) > e.max_expr_bytes:
      err = "too_long"
    elif tag == "calc":
      if self.calls[r] >= e.max_calls:
        err = "budget"
      else:
        self.calls[r] += 1
        u = self.draws[self.turn]
        if u[0] < np.float32(e.fault_rate):
          err = "calc_fault"
        elif u[1] < np.float32(e.busy_rate):
          err = "calc_busy"
        else:
          code, value, _ = ar.evaluate(arg)
          err = CALC_ERRORS.get(code, "ok")
    elif r == 0:
      err, value = ("ok", int(arg)) if _is_int(arg) else ("answer_not_int", None)
    elif arg.lower() in (b"reject", b"accept"):
      verdict = int(arg.lower() == b"accept")
    else:
      err = "verdict_word"
    invalid = err in INVALID
    tool_err = kind == 0 and err != "ok" and not invalid
    proposal = r == 0 and tag == "answer" and err == "ok"
    pending_ok = self.proposed == self.answer
    accept, reject = verdict == 1, verdict == 0
    verdict_correct = (accept and pending_ok) or (reject and not pending_ok)
    if r == 0:
      solver = (e.format_reward * (proposal and value != self.answer) + e.invalid_penalty * invalid
                + e.tool_error_penalty * tool_err)
      verifier = 0.0
    else:
      solver = e.solver_scale * (accept and pending_ok)
      verifier = (e.verifier_scale * verdict_correct + e.verifier_invalid_penalty * invalid
                  + e.tool_error_penalty * tool_err)
    # feedback of this turn, for whoever acts next
    if tag == "calc" and err == "ok":
      feedback = _info(ref.result_text(value))
    elif reject:
      feedback = _info(f"the verifier rejected {self.proposed}")
    elif err != "ok":
      feedback = fmt.message_text(E.code(err), kind)
    else:
      feedback = ""
    if r == 0 and tag == "calc" and err == "ok":
      self.results.append(value)
    if proposal:
      self.rounds, self.proposed, self.agent = self.rounds + 1, value, 1
    if reject:
      self.agent = 0
    self.solved |= accept and pending_ok
    terminated = accept or (reject and self.rounds >= e.max_rounds)
    self.turn += 1
    self.done = terminated or self.turn >= e.max_turns
    body = ""
    if proposal or e.repeat_problem:
      body = "\n" + self.problem
      if self.agent == 1:
        res = "".join(" " + ref.result_text(v) for v in self.results) or " none"
        body += f"\nThe solver's calculator results:{res}.\nThe solver's answer: {self.proposed}."
    return dict(agent_id=r, next_agent=self.agent, done=self.done, success=self.solved,
                truncated=self.done and not terminated, terms=[solver, verifier],
                valid_action=not invalid, tool_call=kind == 0, tool_error=err != "ok",
                answered=err == "ok" and kind == 1, fatal=err == "calc_fault",
                verdict=-1 if verdict is None else verdict, verdict_correct=verdict_correct,
                obs=LINES[self.agent] + feedback + body, err=err)


def _actions(texts):
  return batched.texts(TOK, texts, A_LEN, strict=True)


def _one(tree, k):
  return jax.tree.map(lambda x: x[k], tree)


def _decode(obs, k):
  return TOK.decode(np.asarray(obs.tokens[k])[:int(obs.length[k])])


def _draws(env, states):
  """`[B, max_turns, 2]` host copy of every row's fault uniforms."""
  return np.stack([np.stack([np.asarray(calc.fault_draws(jax.random.wrap_key_data(key), t))
                             for t in range(env.max_turns)]) for key in np.asarray(states.key)])


def _run(seed, choose, env=ENV):
  """Plays B episodes, `choose(k, ref_episode, rng) -> action str` per live row and turn, and
  checks every live row's step against RefEpisode. Returns (refs, per-step logs)."""
  rng = np.random.default_rng(seed)
  tasks = vsample(env, jax.random.key(seed), B)
  states, obs = vreset(env, jax.random.split(jax.random.key(seed + 100), B), tasks)
  host = jax.device_get(tasks)
  draws = _draws(env, states)
  refs = [RefEpisode(env, _one(host, k), draws[k]) for k in range(B)]
  assert [_decode(obs, k) for k in range(B)] == [r.first_obs() for r in refs]
  np.testing.assert_array_equal(jax.vmap(env.first_agent)(states), 0)
  logs = []
  for _ in range(env.max_turns):
    live = [not r.done for r in refs]
    texts = [choose(k, r, rng) if live[k] else "" for k, r in enumerate(refs)]
    states, obs, reward, done, info = jax.device_get(vstep(env, states, _actions(texts)))
    for k, r in enumerate(refs):
      if not live[k]:
        assert done[k] and float(reward[k]) == 0.0
        continue
      want, msg = r.step(texts[k].encode()), f"row {k}: {texts[k]!r}"
      np.testing.assert_allclose(info["reward_terms"][k], want["terms"], atol=1e-6, err_msg=msg)
      np.testing.assert_allclose(reward[k], sum(want["terms"]), atol=1e-6, err_msg=msg)
      assert bool(done[k]) == want["done"], msg
      for key in ("agent_id", "success", "truncated", "valid_action", "tool_call", "tool_error",
                  "answered", "fatal", "verdict", "verdict_correct"):
        assert info[key][k] == want[key], (key, msg)
      if not want["done"]:
        assert int(info["next_agent"][k]) == want["next_agent"], msg
        assert _decode(obs, k) == want["obs"], msg
      logs.append(want)
  assert all(r.done for r in refs)
  return refs, logs


_PIECES = ["<calc>", "</calc>", "<answer>", "</answer>", "<verdict>", "</verdict>", "<think>",
           "</think>", " ", "1", "23", "-", "/", "(", ")", "x", "0", "\n", "accept", "reject", "√"]
_VERDICTS = ["<verdict> accept </verdict>", "<verdict>reject</verdict>", " <verdict> Accept </verdict>",
             "<verdict> REJECT </verdict>\nsure", "<think>I reject</think><verdict> accept </verdict>"]
_BAD_VERDICTS = ["<verdict> maybe </verdict>", "<verdict> accepted </verdict>", "<verdict> </verdict>",
                 "<verdict> accept", "<answer> 5 </answer>", "accept", "<verdict> 1 </verdict>"]


def _expr(rng):
  a, b = int(rng.integers(0, 1000)), int(rng.integers(0, 12))
  return rng.choice([f"{a} {rng.choice(list('+-*/'))} {b}", f"({a} + 1) / {b}", "99999 * 99999",
                     "1 +", "1+" * 33 + "1", f"-{a}"])


def _random_action(k, r, rng):
  """Valid calls, answers, verdicts and garbage; rows k % 4 == 0 mostly call the calculator
  (to reach the budget), the others answer often (to reach the verifier)."""
  u = rng.random()
  if u < 0.15:
    return "".join(rng.choice(_PIECES, size=int(rng.integers(0, 12))))
  if r.agent == 1:
    if u < 0.70:
      return str(rng.choice(_VERDICTS))
    return f"<calc> {_expr(rng)} </calc>" if u < 0.85 else str(rng.choice(_BAD_VERDICTS))
  calc_share = 0.9 if k % 4 == 0 else 0.45
  if u < calc_share:
    if rng.random() < 0.5:
      return f"<calc> {_expr(rng)} </calc>"
    steps = P.gold_steps(r.task)
    return f"<calc> {steps[min(len(r.results), len(steps) - 1)]} </calc>"
  a = r.answer
  return str(rng.choice([f"<answer> {a} </answer>", f"<answer> {a} </answer>", f"<answer>+{a}</answer>",
                         f"<answer> {a + 1} </answer>", f"<answer> -{a} </answer>",
                         "<answer> 1.5 </answer>", f"<think><answer> {a} </answer></think>",
                         f"<verdict> accept </verdict><answer> {a} </answer>"]))


def test_random_episodes_match_the_role_reference():
  seen = {}
  for seed in range(3):
    refs, logs = _run(seed, _random_action)
    for w in logs:
      key = ("verdict", w["verdict"], w["verdict_correct"]) if w["verdict"] >= 0 else ("err", w["err"])
      seen[key] = seen.get(key, 0) + 1
      seen["truncated"] = seen.get("truncated", 0) + w["truncated"]
      seen["max_rounds"] = seen.get("max_rounds", 0) + (w["done"] and w["verdict"] == 0)
    seen["success"] = seen.get("success", 0) + sum(r.solved for r in refs)
  # every rule was exercised: accept/reject x right/wrong, faults, budget, invalid turns
  for key in [("verdict", v, c) for v in (0, 1) for c in (False, True)] + [
      ("err", e) for e in ("ok", "calc_fault", "calc_busy", "budget", "calc_syntax",
                           "calc_div_zero", "calc_overflow", "too_long", "no_call",
                           "unclosed", "empty", "answer_not_int", "verdict_word")] + [
      "truncated", "max_rounds", "success"]:
    assert seen.get(key, 0) > 0, (key, seen)


def test_repeated_problem_views_match_the_reference():
  """repeat_problem: every view ends with the role's block (the verifier's holds the solver's
  results and proposal), here with 3 rounds, no faults and other reward scales."""
  env = CalcMathVerify(tokenizer=TOK, max_steps=3, max_turns=8, max_calls=3, max_rounds=3,
                       repeat_problem=True, solver_scale=2.0, verifier_scale=0.5,
                       format_reward=0.0, tool_error_penalty=-0.05)
  refs, logs = _run(11, _random_action, env)
  assert any(w["next_agent"] == 1 and w["agent_id"] == 1 and not w["done"] for w in logs)
  assert max(r.rounds for r in refs) == 3


def _plan_with_retries(plans):
  """The expert plan, each call repeated while the tool faults (the reference knows when)."""
  def choose(k, r, rng):
    p = plans[k]
    return p[-1] if r.agent == 1 else p[min(len(r.results), len(p) - 2)]
  return choose


def test_solver_plans_are_accepted_and_succeed():
  tasks = jax.device_get(vsample(ENV, jax.random.key(7), B))
  plans = [ENV.solve(_one(tasks, k)) for k in range(B)]
  assert all(p[-1] == "<verdict> accept </verdict>" and p[:-1] == ENV.base.solve(_one(tasks, k))
             for k, p in enumerate(plans))
  refs, logs = _run(7, _plan_with_retries(plans))
  faulted = sum(w["err"] in ("calc_fault", "calc_busy") for w in logs)
  # a row fails only when faults spent its budget or turns (the reference says so)
  for r in refs:
    assert r.solved or r.calls[0] == ENV.max_calls or r.turn == ENV.max_turns
  assert faulted > 0 and sum(r.solved for r in refs) >= B - 2
  got = [w for w in logs if w["verdict"] == 1]
  assert all(w["terms"] == [ENV.solver_scale, ENV.verifier_scale] for w in got)


def test_jit_of_one_episode_equals_the_vmapped_row():
  tasks = vsample(ENV, jax.random.key(1), B)
  states, _ = vreset(ENV, jax.random.split(jax.random.key(2), B), tasks)
  texts = ["<calc> 1 + 1 </calc>", "<answer> 3 </answer>"] * (B // 2)
  batched = vstep(ENV, states, _actions(texts))
  single = jax.jit(ENV.step)(_one(states, 1), _one(_actions(texts), 1))
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a)[1], b), batched, single)


def test_state_hash_is_deterministic_and_tracks_the_state():
  tasks = vsample(ENV, jax.random.key(3), B)
  keys = jax.random.split(jax.random.key(4), B)
  s0, _ = vreset(ENV, keys, tasks)
  again, _ = vreset(ENV, keys, tasks)
  np.testing.assert_array_equal(jax.vmap(ENV.state_hash)(s0), jax.vmap(ENV.state_hash)(again))
  acts = _actions(["<answer> 7 </answer>"] * B)
  s1, _, _, _, i1 = vstep(ENV, s0, acts)
  _, _, _, _, i2 = vstep(ENV, again, acts)
  np.testing.assert_array_equal(i1["state_hash"], i2["state_hash"])
  np.testing.assert_array_equal(jax.vmap(ENV.state_hash)(s1), i1["state_hash"])
  assert (np.asarray(i1["state_hash"]) != np.asarray(jax.vmap(ENV.state_hash)(s0))).all()
  # the same proposal with another turn holder or pending answer hashes differently
  s2 = s1.replace(agent=jnp.zeros_like(s1.agent))
  assert (np.asarray(jax.vmap(ENV.state_hash)(s2)) != np.asarray(i1["state_hash"])).all()


def test_registered_multi_agent_contract_and_bad_config_names_the_field():
  env = envs.make("calc_math_verify", tokenizer=TOK)
  assert isinstance(env, CalcMathVerify) and env.roles == ("solver", "verifier")
  assert all(t in env.reward_names for t in env.role_reward_terms) and len(env.role_reward_terms) == 2
  assert (env.solver_scale, env.verifier_scale, env.max_rounds) == (1.0, 0.2, 2)
  for kw, field in ((dict(max_rounds=0), "max_rounds"), (dict(verifier_scale=0.0), "verifier_scale"),
                    (dict(max_turns=0), "max_turns"), (dict(fault_rate=2.0), "fault_rate"),
                    (dict(min_steps=3, max_steps=2), "min_steps")):
    with pytest.raises(ValueError, match=field):
      CalcMathVerify(tokenizer=TOK, **kw)
  with pytest.raises(ValueError, match="tokenizer"):
    CalcMathVerify(tokenizer=None)
  task = _one(jax.device_get(vsample(ENV, jax.random.key(0), B)), 0).replace(num_steps=2)
  with pytest.raises(ValueError, match="max_turns=3"):
    CalcMathVerify(tokenizer=TOK, max_turns=3).solve(task)
