"""KB-SearchQA's world: a random entity-relation graph, its passages and its questions (host).

One task family = one seed. Entities of five types (film, person, company, city, country)
get names from small word pools, so many entities share words (similar entities are the
distractors a lexical retriever must rank below the right passage). Functional relations
(film -directed_by-> person -born_in-> city -located_in-> country; person -works_for->
company -headquartered_in-> city) and year attributes (release, birth, founding) give one
short passage per fact, the collection Search-R1 (Jin et al. 2025) retrieves from.
Questions are HotpotQA-style (Yang et al. 2018): *bridge* chains of 1-4 relations ("What is
the country of the birthplace of the director of The Red Harbor?") and *comparisons* of a
year attribute of two entities, directly (2 facts) or through one bridge relation each
(4 facts). Each question lists its gold facts in the order they must be found (the hops)
and one gold sub-query per fact; a `parametric_frac` share of questions state their facts in
the prompt (CARL's competence split: no search is needed).
"""
from __future__ import annotations

import dataclasses
import random
import re

import numpy as np

TYPES = ("film", "person", "company", "city", "country")
SHARES = (0.25, 0.35, 0.15, 0.2, 0.05)   # of num_entities; ~2 passages per entity

# name, subject type, object type ("year" = an attribute), passage, question phrase, sub-query
RELATIONS = (
    ("directed_by", "film", "person", "{s} is a film directed by {o}.", "the director of {x}", "{s} film directed by"),
    ("born_in", "person", "city", "{s} was born in the city of {o}.", "the birthplace of {x}", "{s} born in city"),
    ("works_for", "person", "company", "{s} works for the company {o}.", "the employer of {x}", "{s} works for company"),
    ("headquartered_in", "company", "city", "{s} is headquartered in {o}.", "the headquarters city of {x}", "{s} headquartered in"),
    ("located_in", "city", "country", "{s} is a city in the country {o}.", "the country of {x}", "{s} city in country"),
    ("release_year", "film", "year", "{s} was released in the year {o}.", "the release year of {x}", "{s} released year"),
    ("birth_year", "person", "year", "{s} was born in the year {o}.", "the birth year of {x}", "{s} born year"),
    ("founded_year", "company", "year", "{s} was founded in the year {o}.", "the founding year of {x}", "{s} founded year"),
)
REL = {r[0]: i for i, r in enumerate(RELATIONS)}
YEARS = {"film": (1950, 2020), "person": (1920, 2000), "company": (1850, 2015)}
YEAR_REL = {"film": "release_year", "person": "birth_year", "company": "founded_year"}
COMPARE_BRIDGE = {"film": "directed_by", "person": "works_for"}   # compare through one hop
COMPARE_TEXT = {("film", None): "the earlier release year", ("person", None): "the earlier birth year",
                ("company", None): "the earlier founding year",
                ("film", "directed_by"): "the director with the earlier birth year",
                ("person", "works_for"): "the employer with the earlier founding year"}


def _pool(rng: random.Random, n: int, syll: int, suffix: str = "") -> list[str]:
  cons, vows = "bdfgklmnprstvz", "aeiou"
  out = set()
  while len(out) < n:
    w = "".join(rng.choice(cons) + rng.choice(vows) for _ in range(syll))
    out.add((w + suffix).capitalize())
  return sorted(out)


@dataclasses.dataclass
class Question:
  """kind: "bridge" | "compare"; facts: gold passage ids in hop order; queries: one gold
  sub-query per fact; answer: the gold answer string."""
  text: str
  answer: str
  kind: str
  facts: list[int]
  queries: list[str]
  parametric: bool


class World:
  """`World(num_entities, seed)`: entities, facts, passages (title, text) and questions."""

  def __init__(self, num_entities: int = 200, seed: int = 0, num_questions: int = 256,
               parametric_frac: float = 0.25, max_hops: int = 4, min_hops: int = 1):
    if num_entities < 40:
      raise ValueError(f"KB-SearchQA num_entities must be >= 40, got {num_entities}")
    if not 1 <= max_hops <= 4:
      raise ValueError(f"KB-SearchQA max_hops must be in [1, 4], got {max_hops}")
    if not 1 <= min_hops <= max_hops:
      raise ValueError(f"KB-SearchQA min_hops must be in [1, max_hops={max_hops}], got {min_hops}")
    rng = random.Random(seed)
    counts = [max(4, int(round(num_entities * s))) for s in SHARES]
    k = max(8, int(np.sqrt(counts[1]) * 1.3))
    first, last = _pool(rng, k, 2), _pool(rng, k + 4, 3)
    adj, noun = _pool(rng, k, 2), _pool(rng, k + 2, 2, "r")
    root = _pool(rng, counts[2], 2, "x")
    suffix = ["Systems", "Labs", "Works", "Group", "Media", "Motors", "Foods", "Press"]
    self.names = {
        "film": _unique(rng, counts[0], lambda: f"The {rng.choice(adj)} {rng.choice(noun)}"),
        "person": _unique(rng, counts[1], lambda: f"{rng.choice(first)} {rng.choice(last)}"),
        "company": _unique(rng, counts[2], lambda: f"{rng.choice(root)} {rng.choice(suffix)}"),
        "city": _pool(rng, counts[3], 3, "a"),
        "country": _pool(rng, counts[4], 2, "ia"),
    }
    for t in TYPES:
      rng.shuffle(self.names[t])
    # facts[(rel, subject index)] = object index (or a year), one passage each
    self.objects, self.passages, self.fact_id = {}, [], {}
    for r, (name, st, ot, tmpl, _, _) in enumerate(RELATIONS):
      for s in range(len(self.names[st])):
        o = (rng.randint(*YEARS[st]) if ot == "year" else rng.randrange(len(self.names[ot])))
        self.objects[(r, s)] = o
        self.fact_id[(r, s)] = len(self.passages)
        self.passages.append((self.names[st][s], tmpl.format(s=self.names[st][s], o=self.value(r, o))))
    self.questions = []
    qrng = random.Random(seed + 1)
    while len(self.questions) < num_questions:
      hops = min_hops + len(self.questions) % (max_hops - min_hops + 1)
      q = self._bridge(qrng, hops) if hops % 2 or qrng.random() < 0.5 else self._compare(qrng, hops)
      if q is not None:
        q.parametric = qrng.random() < parametric_frac
        self.questions.append(q)

  def value(self, r: int, o: int) -> str:
    ot = RELATIONS[r][2]
    return str(o) if ot == "year" else self.names[ot][o]

  def follow(self, r: int, s: int) -> int:
    return self.objects[(r, s)]

  def _bridge(self, rng: random.Random, hops: int) -> Question | None:
    chains = [c for c in _chains(hops)]
    chain = rng.choice(chains)
    st = RELATIONS[chain[0]][1]
    e = rng.randrange(len(self.names[st]))
    phrase, facts, queries, cur = self.names[st][e], [], [], e
    for r in chain:
      facts.append(self.fact_id[(r, cur)])
      queries.append(RELATIONS[r][5].format(s=self.value_of(RELATIONS[r][1], cur)))
      phrase = RELATIONS[r][4].format(x=phrase)
      cur = self.follow(r, cur)
    return Question(f"What is {phrase}?", self.value(chain[-1], cur), "bridge", facts, queries, False)

  def value_of(self, t: str, i: int) -> str:
    return self.names[t][i]

  def _compare(self, rng: random.Random, hops: int) -> Question | None:
    if hops == 2:
      t = rng.choice(("film", "person", "company"))
      via, target = None, t
    else:
      t = rng.choice(tuple(COMPARE_BRIDGE))
      via = REL[COMPARE_BRIDGE[t]]
      target = RELATIONS[via][2]
    yr = REL[YEAR_REL[target]]
    a, b = rng.sample(range(len(self.names[t])), 2)
    ends = [self.follow(via, x) if via is not None else x for x in (a, b)]
    years = [self.follow(yr, x) for x in ends]
    if years[0] == years[1] or ends[0] == ends[1]:
      return None
    facts, queries = [], []
    for x, end in zip((a, b), ends):
      if via is not None:
        facts.append(self.fact_id[(via, x)])
        queries.append(RELATIONS[via][5].format(s=self.names[t][x]))
    for end in ends:
      facts.append(self.fact_id[(yr, end)])
      queries.append(RELATIONS[yr][5].format(s=self.names[target][end]))
    what = COMPARE_TEXT[(t, None if via is None else RELATIONS[via][0])]
    winner = (a, b)[int(years[1] < years[0])]
    text = f"Which {t} has {what}, {self.names[t][a]} or {self.names[t][b]}?"
    return Question(text, self.names[t][winner], "compare", facts, queries, False)

  def prompt(self, q: Question) -> str:
    """The first observation: the question, with its facts stated when it is parametric."""
    text = f"Question: {q.text}"
    if q.parametric:
      text += " Known facts: " + " ".join(self.passages[f][1] for f in q.facts)
    return text + "\n"


def _unique(rng: random.Random, n: int, make) -> list[str]:
  out, tries = set(), 0
  while len(out) < n:
    out.add(make())
    tries += 1
    if tries > 200 * n:
      raise ValueError(f"KB-SearchQA name pools too small for {n} entities")
  return sorted(out)


def _chains(hops: int) -> list[tuple[int, ...]]:
  """Relation chains of `hops` relations where each object type is the next subject type."""
  out = [(r,) for r in range(len(RELATIONS))]
  for _ in range(hops - 1):
    out = [c + (r,) for c in out for r in range(len(RELATIONS))
           if RELATIONS[c[-1]][2] == RELATIONS[r][1]]
  return out


def words(text: str) -> list[str]:
  """The index and query tokenization: lower-cased `[a-z0-9]+` runs (as MiniShop's)."""
  return re.findall(r"[a-z0-9]+", text.lower())
