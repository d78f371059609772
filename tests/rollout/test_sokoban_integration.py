"""The compiled rollout and the host bridge on the real Sokoban env with a sentencepiece tokenizer."""
import jax
import numpy as np
import pytest

from agent_rl.rollout.bridge import HostRollout, JaxHostEnv
from agent_rl.rollout.compiled import make_rollout
from tests.rollout.sokoban_policy import sokoban_setup


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  return sokoban_setup(str(tmp_path_factory.mktemp("tok")), 2, 2)


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
