"""KB-SearchQA: multi-hop question answering with a search tool, in pure JAX (issue 19 §2).

Search-R1's loop (Jin et al. 2025, arXiv:2503.09516): the agent reads a question, may call
`<search>query</search>` (top-k passages by BM25 come back as `<information>Doc 1(Title: ..)
..</information>`, each cut to `result_tokens` tokens; at most `max_searches` calls an
episode) and ends with `<answer>..</answer>`. The world (world.py) is a random entity-relation
graph per `kb_seed`, one passage per fact; questions are HotpotQA-style bridge chains of 1-4
hops and comparisons (2 or 4 facts). The turn format is the shared tool layer's
(`agent_rl.envs.tools`); retrieval is the shared JAX BM25 (`agent_rl.envs.bm25`, Lucene
k1 0.9 / b 0.4 like Pyserini, tested against `bm25s`).

Reward terms (`reward_weights`, default (1, 0, 0) = Search-R1's EM reward):
    em      Search-R1's normalized exact match of a valid answer (answer.py), on that turn
    f1      token F1 of the same answer (the partial-credit variant)
    format  1 if the turn was not a valid call or answer (any tool error)
info (per turn, beside the fixed keys): the tool layer's `tool_call`, `tool_error`,
`answered`, `fatal` (every tool error, OpenSearch-VL's erroneous step); `em`, `f1` (the
episode's scores so far); `truncated`; `parametric` (the question states its facts in the
prompt: CARL's split, a search is unnecessary); `hops` (gold facts); `gold_hit` (this search
retrieved the next hop's gold fact: the first gold fact not retrieved before, in hop order);
`prm_score` and `step_mask` for the `pica` kernel. PiCA's step reward is r_i = 1 - p_i - b
(credit/process.py, ALGORITHMS.md §4.7): p is a *cost* score, so `prm_score` = 1 - gold_hit on
search turns (0 when the search found the next fact, reward +0.5 at b = 0.5; 1 when it did
not, -0.5) and 0 elsewhere; `step_mask` = the turn ran a search (PiCA scores search steps).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from agent_rl.envs import bm25, tools
from agent_rl.envs.base import ENVS, Text, fingerprint, step_limit, validate_fields
from agent_rl.envs.byte_scan import lower
from agent_rl.envs.kb_search_qa import answer as ans
from agent_rl.envs.kb_search_qa.world import World, words
from agent_rl.envs.byte_scan import WordTable
from agent_rl.envs.render import PieceTable, compact

REWARD_NAMES = ("em", "f1", "format")
MAX_FACTS = 4


@struct.dataclass
class KBTask:
  """question: int32 index into the family's question table."""
  question: jax.Array


@struct.dataclass
class KBState:
  task: KBTask
  found: jax.Array      # [MAX_FACTS] bool gold facts retrieved so far
  searches: jax.Array   # int32 tool calls that ran
  steps: jax.Array      # int32 turns
  done: jax.Array       # bool
  answered: jax.Array   # bool a valid answer was given
  em: jax.Array         # f32 of the answer (0 before)
  f1: jax.Array         # f32


@functools.lru_cache(maxsize=8)
def _world(num_entities, seed, num_questions, parametric_frac, max_hops, min_hops, k1, b, max_words,
           max_postings):
  world = World(num_entities, seed, num_questions, parametric_frac, max_hops, min_hops)
  docs = [words(f"{t} {x}") for t, x in world.passages]
  terms, index = bm25.sparse_index(docs, k1, b, max_words=max_words, max_postings=max_postings)
  return world, terms, index


def _rows(tokenizer, texts, pad):
  ids = [list(tokenizer.encode(t)) for t in texts]
  out = np.full((len(ids), max(1, max(len(i) for i in ids))), pad, np.int32)
  for r, i in enumerate(ids):
    out[r, :len(i)] = i
  return out, np.array([len(i) for i in ids], np.int32)


@ENVS.register("kb_search_qa")
@dataclasses.dataclass(frozen=True)
class KBSearchQA:
  """`make("kb_search_qa", tokenizer=tok, num_entities=200, top_k=3, max_searches=4)`."""
  tokenizer: Any = dataclasses.field(default=None, compare=False, repr=False)
  num_entities: int = 200
  kb_seed: int = 0
  num_questions: int = 256
  parametric_frac: float = 0.25
  max_hops: int = 4
  min_hops: int = 1  # questions cycle through min_hops..max_hops gold facts (bridges / comparisons)
  top_k: int = 3
  result_tokens: int = 64
  max_searches: int = 4
  max_turns: int = 5
  max_query_words: int = 8
  max_arg_bytes: int = 64
  max_bytes: int = 256
  answer_words: int = 8
  bm25_k1: float = 0.9
  bm25_b: float = 0.4
  max_postings: int = 64
  reward_weights: tuple = (1.0, 0.0, 0.0)
  fmt: tools.ToolFormat = dataclasses.field(init=False, repr=False)

  reward_names = REWARD_NAMES
  # Plan turns are whole tool-format turns (`<search>..</search>`, `<answer>..</answer>`), used
  # as written by demo and corpus builders (`envs.tasks.plan_format`), not wrapped in <answer>.
  plan_format = "{}"

  def __post_init__(self):
    validate_fields(self, REWARD_NAMES, ("top_k", "result_tokens", "max_turns", "max_query_words",
                                         "max_arg_bytes", "max_bytes", "answer_words", "max_postings"))
    if self.max_searches < 0:
      raise ValueError(f"KBSearchQA.max_searches must be >= 0, got {self.max_searches}")
    if not 0 <= self.parametric_frac <= 1:
      raise ValueError(f"KBSearchQA.parametric_frac must be in [0, 1], got {self.parametric_frac}")
    if self.num_questions < 1:
      raise ValueError(f"KBSearchQA.num_questions must be >= 1, got {self.num_questions}")
    world, terms, index = _world(self.num_entities, self.kb_seed, self.num_questions,
                                 float(self.parametric_frac), self.max_hops, self.min_hops,
                                 float(self.bm25_k1),
                                 float(self.bm25_b), self.max_query_words, self.max_postings)
    if self.top_k > len(world.passages):
      raise ValueError(f"KBSearchQA.top_k={self.top_k} exceeds the {len(world.passages)} passages")
    tok, pad = self.tokenizer, int(self.tokenizer.pad_id)
    fmt = tools.ToolFormat(tok, ("search",), "answer", max_arg_bytes=self.max_arg_bytes,
                           max_bytes=self.max_bytes, budget=self.max_searches, fatal="*",
                           tool_errors=())
    qs = world.questions
    facts = np.full((len(qs), MAX_FACTS), -1, np.int32)
    for i, q in enumerate(qs):
      facts[i, :len(q.facts)] = q.facts
    width = max(len(w.encode()) for q in qs for w in ans.normalize_host(q.answer))
    pieces = PieceTable(tok, [fmt.result_open, fmt.result_close, "No results.\n"]
                        + [f"Doc {i + 1}" for i in range(self.top_k)])
    sets = dict(
        world=world, terms=terms, index=index, term_table=WordTable(terms), pieces=pieces,
        passages=_rows(tok, [f"(Title: {t}) {x}\n" for t, x in world.passages], pad),
        prompts=_rows(tok, [world.prompt(q) for q in qs], pad),
        privileged=_rows(tok, [f"Answer: {q.answer}. Facts: " + " ".join(world.passages[f][1] for f in q.facts)
                               for q in qs], pad),
        facts=facts, parametric=np.array([q.parametric for q in qs]),
        hops=np.array([len(q.facts) for q in qs], np.int32), answer_width=width,
        gold=ans.gold_table([q.answer for q in qs], self.answer_words, width), fmt=fmt)
    for k, v in sets.items():
      object.__setattr__(self, k, v)
    p_len = pieces.lengths
    res_len = int(p_len[0] + p_len[1] + max(p_len[2], sum(p_len[3:]) + self.top_k * min(
        self.result_tokens, int(self.passages[1].max()))))
    object.__setattr__(self, "obs_len", max(int(self.prompts[1].max()), res_len, fmt.message_len))

  @property
  def instruction(self) -> str:
    return self.fmt.instruction_text("Answer the given question.")

  # -- tasks ----------------------------------------------------------------------------------
  def sample_task(self, key: jax.Array) -> KBTask:
    return KBTask(question=jax.random.randint(key, (), 0, len(self.world.questions), jnp.int32))

  def task_from_index(self, i: int) -> KBTask:
    if not 0 <= i < len(self.world.questions):
      raise ValueError(f"KBSearchQA question index must be in [0, {len(self.world.questions)}), got {i}")
    return KBTask(question=jnp.int32(i))

  # -- pure pieces of the step ----------------------------------------------------------------
  def query_terms(self, arg: jax.Array, arg_len: jax.Array) -> jax.Array:
    """`[max_query_words] int32` BM25 term ids of the first query words (`[a-z0-9]+` runs of
    the lower-cased argument, as world.words); -1 for a missing or unknown word."""
    c, q = arg.shape[0], self.max_query_words
    idx = jnp.arange(c, dtype=jnp.int32)
    b = lower(arg)
    alnum = (idx < arg_len) & (((b >= 97) & (b <= 122)) | ((b >= 48) & (b <= 57)))
    prev = jnp.concatenate([jnp.zeros((1,), bool), alnum[:-1]])
    nxt = jnp.concatenate([alnum[1:], jnp.zeros((1,), bool)])
    # k-th word start / end by a [Q, C] comparison (Q, C small; a batched scatter is slower on CPU)
    k = jnp.arange(q, dtype=jnp.int32)[:, None]
    start, end = alnum & ~prev, alnum & ~nxt
    s_k = jnp.min(jnp.where(start & (jnp.cumsum(start) - 1 == k), idx, c), axis=1)
    e_k = jnp.max(jnp.where(end & (jnp.cumsum(end) - 1 == k), idx, 0), axis=1)
    has = s_k < c
    l_k = jnp.where(has, e_k + 1 - s_k, 0)
    w = self.term_table.width
    pos = jnp.arange(w)[None, :]
    wins = jnp.where(pos < l_k[:, None], b[jnp.clip(s_k[:, None] + pos, 0, c - 1)], 0).astype(jnp.uint8)
    return jnp.where(has, self.term_table.lookup(wins, l_k), -1)

  def retrieve(self, terms: jax.Array) -> tuple[jax.Array, jax.Array]:
    """BM25 top-`top_k` passages of a query's term ids: `(results [k] int32, n)`."""
    return bm25.sparse_search(jax.tree.map(jnp.asarray, self.index), terms, self.top_k)

  def render_results(self, results: jax.Array, n: jax.Array) -> Text:
    """`<information>Doc 1(Title: ..) ..` of ranked passages, each cut to result_tokens."""
    pt, pl = self.pieces.tokens, self.pieces.lengths
    ptoks, plens = self.passages
    m = max(pt.shape[1], ptoks.shape[1])
    pad = int(self.tokenizer.pad_id)
    widen = lambda a: jnp.pad(jnp.asarray(a), ((0, 0), (0, m - a.shape[1])), constant_values=pad)
    k = self.top_k
    doc_rows = widen(ptoks)[jnp.maximum(results, 0)]
    doc_lens = jnp.where(results >= 0, jnp.minimum(jnp.asarray(plens)[jnp.maximum(results, 0)], self.result_tokens), 0)
    piece = widen(pt)
    heads = piece[3:3 + k]
    rows = jnp.concatenate([piece[:1], jnp.stack([heads, doc_rows], 1).reshape(2 * k, m), piece[2:3], piece[1:2]])
    lens = jnp.concatenate([jnp.asarray(pl[:1]),
                            jnp.stack([jnp.where(results >= 0, jnp.asarray(pl[3:3 + k]), 0), doc_lens], 1).reshape(-1),
                            jnp.where(n == 0, jnp.asarray(pl[2:3]), 0), jnp.asarray(pl[1:2])])
    out, length = compact(rows, lens, self.obs_len, pad)
    return Text(tokens=out, length=length)

  # -- contract -------------------------------------------------------------------------------
  def initial_state(self, task: KBTask) -> KBState:
    f = jnp.float32(0)
    return KBState(task=task, found=jnp.zeros((MAX_FACTS,), bool), searches=jnp.int32(0),
                   steps=jnp.int32(0), done=jnp.bool_(False), answered=jnp.bool_(False), em=f, f1=f)

  def reset(self, key: jax.Array, task: KBTask):
    del key  # the task fixes the start
    toks, lens = self.prompts
    q = task.question
    row = jnp.asarray(toks)[q]
    n = jnp.minimum(jnp.asarray(lens)[q], self.obs_len)
    pad = int(self.tokenizer.pad_id)
    row = jnp.pad(row, (0, max(0, self.obs_len - row.shape[0])), constant_values=pad)[:self.obs_len]
    return self.initial_state(task), Text(tokens=jnp.where(jnp.arange(self.obs_len) < n, row, pad), length=n)

  def step(self, state: KBState, action: Text):
    fmt = self.fmt
    live = ~state.done
    call = fmt.parse(action)
    call, searches = fmt.charge(call, state.searches, live)
    searched = live & (call.kind == 0) & (call.error == tools.OK)
    results, n = self.retrieve(self.query_terms(call.arg, call.arg_len))
    results = jnp.where(searched, results, -1)
    n = jnp.where(searched, n, 0)
    q = state.task.question
    facts = jnp.asarray(self.facts)[q]                                        # [F]
    in_res = jnp.any((facts[:, None] == results[None, :]) & (results[None, :] >= 0), axis=1) & (facts >= 0)
    todo = ~state.found & (facts >= 0)
    nxt = jnp.argmax(todo)
    hit = searched & jnp.any(todo) & in_res[nxt]
    found = state.found | (in_res & searched)
    answered = live & (call.kind == fmt.answer_kind) & (call.error == tools.OK)
    gold = jax.tree.map(lambda g: jnp.asarray(g)[q], self.gold)
    pred = ans.normalized_words(call.arg, call.arg_len, self.answer_words, self.answer_width)
    em, f1 = ans.em_f1(pred, gold)
    em, f1 = jnp.where(answered, em, 0.0), jnp.where(answered, f1, 0.0)
    steps, done, truncated = step_limit(state.steps, 1, live, answered, state.done, self.max_turns)
    new = KBState(task=state.task, found=found, searches=searches, steps=steps, done=done,
                  answered=state.answered | answered, em=jnp.where(answered, em, state.em),
                  f1=jnp.where(answered, f1, state.f1))
    info = fmt.turn_info(call, live)
    terms = jnp.stack([em, f1, info["tool_error"]]).astype(jnp.float32)
    obs = jax.tree.map(lambda a, b: jnp.where(searched, a, b), self.render_results(results, n),
                       self._pad(fmt.message(call)))
    info.update({"success": new.em >= 1.0, "valid_action": live & ~info["tool_error"],
                 "state_hash": self.state_hash(new), "reward_terms": terms, "truncated": truncated,
                 "em": new.em, "f1": new.f1, "parametric": jnp.asarray(self.parametric)[q],
                 "hops": jnp.asarray(self.hops)[q], "gold_hit": hit,
                 "prm_score": jnp.where(searched, 1.0 - hit.astype(jnp.float32), 0.0),
                 "step_mask": searched})
    reward = jnp.dot(terms, jnp.asarray(self.reward_weights, jnp.float32))
    return new, obs, reward, done, info

  def _pad(self, text: Text) -> Text:
    w = text.tokens.shape[-1]
    toks = jnp.pad(text.tokens, (0, max(0, self.obs_len - w)), constant_values=int(self.tokenizer.pad_id))
    return Text(tokens=toks[:self.obs_len], length=jnp.minimum(text.length, self.obs_len))

  def state_hash(self, state: KBState) -> jax.Array:
    """uint32 fingerprint of (question, gold facts found, searches, turns, done, answer scores)."""
    bits = lambda x: jax.lax.bitcast_convert_type(x.astype(jnp.float32), jnp.uint32)
    return fingerprint(state.task.question, state.found, state.searches, state.steps, state.done,
                       state.answered, bits(state.em), bits(state.f1))

  def privileged_text(self, task: KBTask) -> Text:
    """Hindsight text: the gold answer and the gold facts of the question."""
    toks, lens = self.privileged
    return Text(tokens=jnp.asarray(toks)[task.question], length=jnp.asarray(lens)[task.question])

  # -- host side ------------------------------------------------------------------------------
  def question(self, task: KBTask):
    return self.world.questions[int(task.question)]

  def render_text(self, state_or_task) -> str:
    """The question prompt of a task (or of a state's task): decode(reset obs)."""
    task = state_or_task.task if isinstance(state_or_task, KBState) else state_or_task
    return self.world.prompt(self.question(task))

  def solve(self, task: KBTask) -> list[str]:
    """Expert turns: the gold sub-queries in hop order, then the answer; a parametric
    question is answered at once (its facts are in the prompt)."""
    q = self.question(task)
    searches = [] if q.parametric else [f"<search>{s}</search>" for s in q.queries]
    plan = searches[:self.max_searches] + [f"<answer>{q.answer}</answer>"]
    if len(plan) > self.max_turns:
      raise RuntimeError(f"KBSearchQA: the expert plan needs {len(plan)} turns > max_turns={self.max_turns}")
    return plan

  def episode_texts(self, task: KBTask, action_len: int = 96) -> list[str]:
    """Prompt and observations along the expert plan (a tokenizer corpus)."""
    state = jax.tree.map(jnp.asarray, self.initial_state(task))
    texts = [self.render_text(task)]
    for a in self.solve(task):
      ids = list(self.tokenizer.encode(a))[:action_len]
      toks = np.full((action_len,), self.tokenizer.pad_id, np.int32)
      toks[:len(ids)] = ids
      state, obs = _step(self, state, Text(tokens=jnp.asarray(toks), length=jnp.int32(len(ids))))
      texts.append(self.tokenizer.decode(np.asarray(obs.tokens)[:int(obs.length)]))
    return texts


@functools.partial(jax.jit, static_argnums=0)
def _step(env, state, action):
  new, obs, *_ = env.step(state, action)
  return new, obs
