"""The compiled rollout and the host bridge on the real Sokoban env with a sentencepiece tokenizer."""
import jax
import numpy as np
import pytest
from flax import nnx

from agent_rl.rollout.bridge import HostRollout, JaxHostEnv
from agent_rl.rollout.compiled import make_rollout
from agent_rl.rollout.episode import EpisodeConfig
from agent_rl.rollout.layout import chat_pieces
from agent_rl.rollout.policy import Policy
from agent_rl.rollout.sampler import SamplerConfig


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  from agent_rl.envs.sokoban import Sokoban
  from agent_rl.models.presets import get_preset
  from agent_rl.models.transformer import Transformer
  from agent_rl.tokenizers import Tokenizer, train_tokenizer
  rows = ["######", "#_OXP#", "#__√S#", "#_X__#", "#O___#"]
  texts = ["\n".join(rows[(i + j) % 5] for j in range(6)) + "\n" for i in range(50)]
  texts += [f"<answer>{w}</answer> system user assistant" for w in ("Up", "Down", "Left", "Right")]
  path = str(tmp_path_factory.mktemp("tok") / "s.model")
  tok = Tokenizer.load(train_tokenizer(texts * 4, path, 340))
  env = Sokoban(tokenizer=tok, dim_room=(6, 6), num_boxes=1)
  mcfg = get_preset("tiny", vocab_size=tok.vocab_size, hidden=32, num_layers=1, num_heads=2,
                    num_kv_heads=1, head_dim=16, intermediate=64)
  graphdef, params = nnx.split(Transformer(mcfg, rngs=nnx.Rngs(0)))
  cfg = EpisodeConfig(sampler=SamplerConfig(max_tokens=8, stop_tokens=(tok.special("<|im_end|>"),
                                                                         tok.eos_id)),
                      max_turns=3, group_size=2)
  tasks = jax.vmap(env.sample_task)(jax.random.split(jax.random.PRNGKey(0), 2))
  return tok, env, Policy.from_model(mcfg, graphdef), params, cfg, tasks, chat_pieces(tok, env.instruction)


@pytest.mark.slow
def test_sokoban_compiled_matches_forward_and_host(setup):
  tok, env, pol, params, cfg, tasks, pieces = setup
  key = jax.random.PRNGKey(1)
  batch, m = make_rollout(pol, env, cfg, pieces)(params, tasks, key)
  logits, _ = pol.forward(pol.graphdef, params, batch.tokens, batch.position, batch.attention_mask)
  lp = np.take_along_axis(np.asarray(jax.nn.log_softmax(logits[:, :-1], -1)),
                          np.asarray(batch.tokens)[:, 1:, None], -1)[..., 0]
  mask = np.asarray(batch.loss_mask)[:, 1:] > 0
  assert mask.sum() > 20
  np.testing.assert_allclose(np.asarray(batch.logprobs)[:, 1:][mask], lp[mask], atol=1e-5)
  # the prompt decodes to the chat layout with the env's instruction and rendered room
  text = tok.decode(np.asarray(batch.tokens)[0][np.asarray(batch.attention_mask)[0]])
  assert env.instruction in text
  assert env.render_text(jax.tree.map(lambda x: x[0], tasks)) in text
  host, _ = HostRollout(pol, JaxHostEnv(env), cfg, pieces)(params, tasks, key)
  assert np.array_equal(np.asarray(host.tokens), np.asarray(batch.tokens))
  np.testing.assert_allclose(np.asarray(host.reward), np.asarray(batch.reward), atol=1e-6)
  assert np.array_equal(np.asarray(host.next_hash), np.asarray(batch.next_hash))


def test_prefill_rows_path_equals_full_logits_path(setup):
  """`Policy.prefill_rows` (head and last MLP only at each row's last prompt token) samples
  the same episodes as taking that row out of the all-position logits."""
  import dataclasses
  tok, env, pol, params, cfg, tasks, pieces = setup
  assert pol.prefill_rows
  key = jax.random.PRNGKey(3)
  fast, _ = make_rollout(pol, env, cfg, pieces)(params, tasks, key)
  full, _ = make_rollout(dataclasses.replace(pol, prefill_rows=False), env, cfg, pieces)(
      params, tasks, key)
  assert np.array_equal(np.asarray(fast.tokens), np.asarray(full.tokens))
  assert np.asarray(fast.loss_mask).sum() > 20
  np.testing.assert_allclose(np.asarray(fast.logprobs), np.asarray(full.logprobs), atol=1e-5)
