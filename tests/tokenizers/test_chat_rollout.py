"""The real compiled rollout (make_rollout, Sokoban, a tiny random policy) with a Hugging Face
Qwen2.5-style tokenizer and its chat template: each episode's ids are the template's pieces
around the env's observation ids and exactly the generated ids (token-in-token-out), and the
decoded episode is the template's rendering of the same conversation."""
import jax
import numpy as np
import pytest
from flax import nnx

from agent_rl.rollout.compiled import make_rollout
from agent_rl.rollout.episode import EpisodeConfig
from agent_rl.rollout.layout import chat_pieces
from agent_rl.rollout.policy import Policy
from agent_rl.rollout.sampler import SamplerConfig
from agent_rl.tokenizers import chat, load_hf
from tests.tokenizers.hf_fixtures import hf_dir

SYSTEM = "You are a helpful agent."


@pytest.fixture(scope="module")
def run():
  from agent_rl.envs.sokoban import Sokoban
  from agent_rl.models.presets import get_preset
  from agent_rl.models.transformer import Transformer
  tok = load_hf(hf_dir("qwen2", "qwen2.5"))
  env = Sokoban(tokenizer=tok, dim_room=(6, 6), num_boxes=1)
  p = chat.prompt_pieces(tok, env.instruction, SYSTEM)
  mcfg = get_preset("tiny", vocab_size=tok.vocab_size, hidden=32, num_layers=1, num_heads=2,
                    num_kv_heads=1, head_dim=16, intermediate=64)
  graphdef, params = nnx.split(Transformer(mcfg, rngs=nnx.Rngs(0)))
  # Stop on the template's turn end; a policy that never emits it is cut at max_tokens.
  cfg = EpisodeConfig(sampler=SamplerConfig(max_tokens=6, stop_tokens=(p.turn_end_id,) + tok.eos_ids),
                      max_turns=3, group_size=2)
  tasks = jax.vmap(env.sample_task)(jax.random.split(jax.random.PRNGKey(0), 2))
  pieces = chat_pieces(tok, env.instruction, SYSTEM)
  batch, _ = make_rollout(Policy.from_model(mcfg, graphdef), env, cfg, pieces)(
      params, tasks, jax.random.PRNGKey(1))
  return tok, env, p, tasks, batch


def test_rollout_ids_are_template_pieces_and_generated_ids(run):
  tok, env, p, tasks, batch = run
  tokens = np.asarray(batch.tokens)
  real = np.asarray(batch.attention_mask) if batch.attention_mask is not None else None
  gen = np.asarray(batch.loss_mask) > 0
  turn = np.asarray(batch.turn_index)
  cut = 0
  for n in range(tokens.shape[0]):
    seq = tokens[n][real[n]] if real is not None else tokens[n]
    g, t_of = gen[n][real[n]] if real is not None else gen[n], turn[n][real[n]] if real is not None else turn[n]
    task = jax.tree.map(lambda x: x[n // 2], tasks)   # group_size 2: rows 2i, 2i+1 share task i
    obs0 = env.render(env.reset(jax.random.PRNGKey(0), task)[0])
    acts = [seq[g & (t_of == t)].tolist() for t in range(int(t_of.max()) + 1)]
    # Rebuild the episode from the pieces, observations read between them, and the actions.
    pos = len(p.first_ids)
    assert seq[:pos].tolist() == list(p.first_ids)
    want, texts = list(p.first_ids), []
    for t, act in enumerate(acts):
      if t:
        assert seq[pos:pos + len(p.turn_prefix_ids)].tolist() == list(p.turn_prefix_ids)
        pos += len(p.turn_prefix_ids)
        want += list(p.turn_prefix_ids)
      start = pos + int(np.argmax(g[pos:]))          # the action's first generated token
      obs = seq[pos:start - len(p.header_ids)].tolist()
      assert seq[start - len(p.header_ids):start].tolist() == list(p.header_ids)
      if t == 0:
        assert obs == np.asarray(obs0.tokens)[:int(obs0.length)].tolist()
      want += obs + list(p.header_ids) + act
      texts.append((tok.decode(obs), act))
      pos = start + len(act)
    assert seq.tolist() == want                       # nothing re-tokenized, nothing inserted
    # The decoded episode is the template's rendering of the conversation it holds. A turn
    # cut at max_tokens has no turn-end token: the rollout keeps it so (the policy never
    # wrote one), where re-rendering would add one; `closed` inserts it for the comparison.
    closed = list(p.first_ids)
    for t, (obs_text, act) in enumerate(texts):
      done = bool(act) and act[-1] == p.turn_end_id
      cut += not done
      closed += (list(p.turn_prefix_ids) if t else []) + tok.encode(obs_text) + list(p.header_ids)
      closed += act + ([] if done else [p.turn_end_id])
    msgs = chat._conversation(SYSTEM, env.instruction, [o for o, _ in texts],
                              [tok.decode(a[:-1] if a and a[-1] == p.turn_end_id else a)
                               for _, a in texts])
    assert chat.render(tok, msgs) == tok.decode(closed) + "\n"
  assert gen.sum() > 10 and cut > 0


def test_rendered_prompt_contains_room_and_instruction(run):
  tok, env, p, tasks, batch = run
  real = np.asarray(batch.attention_mask)[0] if batch.attention_mask is not None else slice(None)
  text = tok.decode(np.asarray(batch.tokens)[0][real])
  assert text.startswith(p.first) and env.instruction in text
  assert env.render_text(jax.tree.map(lambda x: x[0], tasks)) in text
