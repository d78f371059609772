"""RAGEN's two-armed bandit: pick the arm whose *name* suggests the better payoff.

RAGEN (Wang et al., 2025, arXiv:2504.20073, `ragen/env/bandit`): each episode shows two arms
named after a (low-risk, high-risk) pair such as ("Librarian", "Investor"), in random order.
The agent reasons (`<think>`) and answers one arm name in `<answer>`; the episode ends after
that one pull. Payoffs as RAGEN's BanditEnvConfig: the low-risk arm pays `lo_arm_score`
(0.1) always; the high-risk arm pays `hi_arm_hiscore` (1.0) with probability
`hi_arm_hiscore_prob` (0.25), else `hi_arm_loscore` (0.0), so its mean 0.25 is higher.
`success` = the chosen arm has the higher expected payoff (RAGEN: "chose the high-risk arm",
the same thing under its defaults); `solve` returns that arm's name.

The payoff is drawn from the key given to `reset` (kept in the state), so an episode key
replays exactly. An answer that is not one of the two shown names (or has no `<answer>`
span) is invalid: `invalid_penalty`, no pull, episode over (RAGEN ends it the same way).
`reward_terms = [arm payoff, invalid (0/1)]`, `reward = reward_terms . reward_weights`
with `reward_weights = (1, invalid_penalty)`. `info["success"]`: the pulled arm is the best.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from agent_rl.envs.actions import ActionParser
from agent_rl.envs.base import ENVS, Text, TokenizerLike, fingerprint
from agent_rl.envs.render import PieceTable

REWARD_NAMES = ("arm", "invalid")

# (low-risk, high-risk) name pairs: a steady occupation or creature against a volatile one.
ARM_NAMES = {
    "train": (
        ("Teacher", "Trader"), ("Nurse", "Gambler"), ("Librarian", "Investor"),
        ("Accountant", "Speculator"), ("Turtle", "Phoenix"), ("Clerk", "Freelancer"),
        ("Postman", "Stuntman"), ("Gardener", "Cryptominer"), ("Tortoise", "Dragon"),
        ("Baker", "Prospector"), ("Lighthouse", "Lottery"), ("Savings", "Jackpot"),
    ),
    "test": (
        ("Receptionist", "Explorer"), ("Archivist", "Daredevil"), ("Bookkeeper", "Adventurer"),
        ("Oak", "Comet"), ("Pharmacist", "Entrepreneur"), ("Cashier", "Treasurehunter"),
    ),
}


@struct.dataclass
class BanditTask:
  """pair: int32 row of ARM_NAMES[split]; swap: bool (True: high-risk arm is shown first)."""
  pair: jax.Array
  swap: jax.Array


@struct.dataclass
class BanditState:
  task: BanditTask
  key: jax.Array      # the reset key: the payoff draw
  chosen: jax.Array   # int32 arm 0 = low-risk, 1 = high-risk, -1 = none/invalid
  done: jax.Array     # bool


def _fmt(x: float) -> str:
  return repr(float(x))


@ENVS.register("bandit")
@dataclasses.dataclass(frozen=True)
class Bandit:
  """Two-armed bandit with RAGEN's payoffs and name pairs (`split` "train" or "test")."""
  tokenizer: TokenizerLike = dataclasses.field(compare=False, hash=False, repr=False)
  split: str = "train"
  lo_arm_score: float = 0.1
  hi_arm_loscore: float = 0.0
  hi_arm_hiscore: float = 1.0
  hi_arm_hiscore_prob: float = 0.25
  invalid_penalty: float = -0.1
  max_answer_bytes: int = 64
  max_bytes: int | None = None  # bytes of the generated turn scanned for the answer (None: all)
  pieces: PieceTable = dataclasses.field(init=False, repr=False)
  parser: ActionParser = dataclasses.field(init=False, repr=False)
  obs_len: int = dataclasses.field(init=False)

  reward_names = REWARD_NAMES

  def __post_init__(self):
    if self.split not in ARM_NAMES:
      raise ValueError(f"split must be one of {sorted(ARM_NAMES)}, got {self.split!r}")
    if not 0.0 <= self.hi_arm_hiscore_prob <= 1.0:
      raise ValueError(f"hi_arm_hiscore_prob must lie in [0, 1], got {self.hi_arm_hiscore_prob}")
    names = [n for pair in self.pairs for n in pair]
    payoffs = sorted({_fmt(self.lo_arm_score), _fmt(self.hi_arm_loscore), _fmt(self.hi_arm_hiscore)})
    table = PieceTable(self.tokenizer, names + ["Arms: ", " and ", ". Which arm do you pull?",
                                                ": ", " points", "Invalid answer: no arm pulled."]
                       + payoffs)
    object.__setattr__(self, "pieces", table)
    # Word i of the parser is name i = 2 * pair + (0 low-risk, 1 high-risk).
    object.__setattr__(self, "parser", ActionParser(
        self.tokenizer, {n: i for i, n in enumerate(names)}, max_answer_bytes=self.max_answer_bytes,
        max_bytes=self.max_bytes))
    first = table.max_tokens([["Arms: "], names, [" and "], names, [". Which arm do you pull?"]])
    after = max(table.max_tokens([names, [": "], payoffs, [" points"]]),
                table.max_tokens([["Invalid answer: no arm pulled."]]))
    object.__setattr__(self, "obs_len", max(first, after))

  # -- host side -----------------------------------------------------------------------------
  @property
  def pairs(self) -> tuple[tuple[str, str], ...]:
    return ARM_NAMES[self.split]

  @property
  def means(self) -> tuple[float, float]:
    """Expected payoff of (low-risk, high-risk) arm."""
    p = self.hi_arm_hiscore_prob
    return self.lo_arm_score, p * self.hi_arm_hiscore + (1 - p) * self.hi_arm_loscore

  @property
  def best_arm(self) -> int:
    """0 (low-risk) or 1 (high-risk): the higher mean; ties go to the low-risk arm."""
    lo, hi = self.means
    return int(hi > lo)

  @property
  def instruction(self) -> str:
    return ("You are playing a bandit game. Goal: maximize your reward by choosing which arm to "
            "pull. There are 2 arms; each has its own reward distribution, related to its name. "
            "Think about what each name suggests about how its rewards behave, inside "
            "<think> </think>, then answer the arm you pull inside <answer> </answer>, "
            "for example <answer> Teacher </answer>.")

  def shown_names(self, task: BanditTask) -> tuple[str, str]:
    lo, hi = self.pairs[int(task.pair)]
    return (hi, lo) if bool(task.swap) else (lo, hi)

  def render_text(self, task: BanditTask) -> str:
    a, b = self.shown_names(task)
    return f"Arms: {a} and {b}. Which arm do you pull?"

  def task_from_names(self, first: str, second: str) -> BanditTask:
    """The task showing arms `first`, `second` (one pair of this split, either order)."""
    for i, (lo, hi) in enumerate(self.pairs):
      if (first, second) in ((lo, hi), (hi, lo)):
        return BanditTask(pair=jnp.int32(i), swap=jnp.bool_(first == hi))
    raise ValueError(f"({first!r}, {second!r}) is not an arm pair of split {self.split!r}")

  def solve(self, task: BanditTask) -> list[str]:
    return [self.pairs[int(task.pair)][self.best_arm]]

  # -- jitted side ---------------------------------------------------------------------------
  def sample_task(self, key: jax.Array) -> BanditTask:
    k_pair, k_swap = jax.random.split(key)
    return BanditTask(pair=jax.random.randint(k_pair, (), 0, len(self.pairs)).astype(jnp.int32),
                      swap=jax.random.bernoulli(k_swap))

  def reset(self, key: jax.Array, task: BanditTask) -> tuple[BanditState, Text]:
    p = self.pieces.id
    lo, hi = 2 * task.pair, 2 * task.pair + 1
    first, second = jnp.where(task.swap, hi, lo), jnp.where(task.swap, lo, hi)
    ids = jnp.stack([jnp.int32(p("Arms: ")), first, jnp.int32(p(" and ")), second,
                     jnp.int32(p(". Which arm do you pull?"))]).astype(jnp.int32)
    state = BanditState(task=task, key=key, chosen=jnp.int32(-1), done=jnp.bool_(False))
    return state, self.pieces.render(ids, self.obs_len)

  def payoff(self, key: jax.Array, arm: jax.Array) -> tuple[jax.Array, jax.Array]:
    """`(payoff f32, jackpot bool)` of pulling `arm` (0 low-risk, 1 high-risk) with `key`."""
    jackpot = (arm == 1) & jax.random.bernoulli(key, self.hi_arm_hiscore_prob)
    hi = jnp.where(jackpot, self.hi_arm_hiscore, self.hi_arm_loscore)
    return jnp.where(arm == 1, hi, self.lo_arm_score).astype(jnp.float32), jackpot

  def step(self, state: BanditState, action: Text):
    acts = self.parser(action)
    word = acts.ids[0]
    live = ~state.done
    valid = live & acts.valid & (word // 2 == state.task.pair)
    arm = jnp.where(valid, word % 2, -1).astype(jnp.int32)
    pay, jackpot = self.payoff(state.key, arm)
    terms = jnp.stack([jnp.where(valid, pay, 0.0), live & ~valid]).astype(jnp.float32)
    new = BanditState(task=state.task, key=state.key, chosen=jnp.where(live, arm, state.chosen),
                      done=jnp.bool_(True))
    obs = self._render_after(state.task, arm, jackpot, valid)
    info = dict(success=new.chosen == self.best_arm, valid_action=valid,
                state_hash=self.state_hash(new), reward_terms=terms)
    return new, obs, jnp.dot(terms, jnp.asarray(self.reward_weights, jnp.float32)), new.done, info

  @property
  def reward_weights(self) -> tuple[float, float]:
    """Weights of `reward_terms` (arm payoff, invalid indicator)."""
    return (1.0, self.invalid_penalty)

  def _render_after(self, task: BanditTask, arm, jackpot, valid) -> Text:
    p = self.pieces.id
    values = [self.lo_arm_score, self.hi_arm_loscore, self.hi_arm_hiscore]
    value_ids = jnp.asarray([p(_fmt(v)) for v in values], jnp.int32)
    which = jnp.where(arm == 1, jnp.where(jackpot, 2, 1), 0)
    ids = jnp.stack([2 * task.pair + jnp.maximum(arm, 0), jnp.int32(p(": ")), value_ids[which],
                     jnp.int32(p(" points")), jnp.int32(p("Invalid answer: no arm pulled."))])
    mask = jnp.stack([valid, valid, valid, valid, ~valid])
    return self.pieces.render(ids.astype(jnp.int32), self.obs_len, mask)

  def state_hash(self, state: BanditState) -> jax.Array:
    return fingerprint(state.task.pair, state.task.swap, state.chosen, state.done)

