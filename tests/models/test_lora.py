"""LoRA: adapters on the seven projections, merge/unmerge, and parity with `peft` on a tiny
Qwen2 (same adapter weights -> same logits, float32, left-padded batch)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agent_rl.models import ModelConfig, Transformer, forward, load_hf, lora
from agent_rl.models.lora import LoraConfig, LoRAParam

from conftest import init_model
from hf_util import hf_logits, our_logits, randomize

ALL = ("q", "k", "v", "o", "gate", "up", "down")
L = 9
TOKENS = np.random.default_rng(2).integers(0, 97, (3, L))
LEFT_MASK = np.array([[1] * L, [0] * 2 + [1] * (L - 2), [0] * 5 + [1] * (L - 5)])


def _random_adapters(cfg, state, seed=1):
  """Nonzero A and B (B starts at zero, which would test nothing)."""
  rng = np.random.default_rng(seed)
  params = nnx.to_pure_dict(state)
  flat = nnx.traversals.flatten_mapping(params)
  for path in flat:
    if "lora" in str(path[-1]):
      flat[path] = jnp.asarray(0.3 * rng.standard_normal(flat[path].shape), jnp.float32)
  nnx.replace_by_pure_dict(state, nnx.traversals.unflatten_mapping(flat))
  return state


def test_adapters_shapes_axes_count_and_zero_start(small_config):
  base = small_config(qkv_bias=True)
  cfg = base.replace(lora=dict(rank=3, alpha=6.0, targets=ALL))
  model = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))
  adapters = nnx.state(model, LoRAParam)
  flat = {"/".join(map(str, p)): v for p, v in nnx.to_flat_state(adapters)}
  assert len(flat) == 2 * len(ALL) * cfg.num_layers
  assert flat["layers/0/attn/q_lora_a"].get_value().shape == (32, 3)
  assert flat["layers/0/attn/q_lora_b"].get_value().shape == (3, 4, 8)
  assert flat["layers/0/attn/o_lora_a"].get_value().shape == (4, 8, 3)
  assert tuple(flat["layers/0/attn/k_lora_b"].get_metadata()["out_sharding"]) == (
      None, "kv_heads", "head_dim")
  assert tuple(flat["layers/1/mlp/down_lora_a"].get_metadata()["out_sharding"]) == ("mlp", None)
  n = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(model)))
  assert n == cfg.num_params() == base.num_params() + 2 * 3 * (
      (32 + 32) + 2 * (32 + 16) + (32 + 32) + 3 * (32 + 64))
  # attach(): fresh adapters on a base model's params start at the base model (B = 0).
  g, s = init_model(base)
  state = lora.attach(cfg, s)
  tokens = jnp.asarray(TOKENS, jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), tokens.shape)
  ones = jnp.ones(tokens.shape, bool)
  g_l = nnx.graphdef(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))
  np.testing.assert_allclose(forward(g_l, state, tokens, pos, ones)[0],
                             forward(g, s, tokens, pos, ones)[0], atol=1e-6, rtol=0)


def test_merge_and_unmerge(small_config):
  base = small_config(qkv_bias=True, tie_embeddings=False)
  cfg = base.replace(lora=LoraConfig(rank=4, alpha=8.0, targets=ALL))
  g, s = init_model(base)
  state = _random_adapters(cfg, lora.attach(cfg, s))
  g_l = nnx.graphdef(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))
  tokens = jnp.asarray(TOKENS, jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), tokens.shape)
  ones = jnp.ones(tokens.shape, bool)
  adapted = forward(g_l, state, tokens, pos, ones)[0]
  assert float(jnp.abs(adapted - forward(g, s, tokens, pos, ones)[0]).max()) > 1e-2
  merged_cfg, merged = lora.merge(cfg, state)
  assert merged_cfg == base
  np.testing.assert_allclose(forward(g, merged, tokens, pos, ones)[0], adapted, atol=1e-5, rtol=0)
  back = lora.unmerge(cfg, merged, nnx.state(nnx.merge(g_l, state), LoRAParam))
  for (p, a), (q, b) in zip(nnx.to_flat_state(back), nnx.to_flat_state(state)):
    assert p == q
    np.testing.assert_allclose(np.asarray(a.get_value()), np.asarray(b.get_value()),
                               atol=1e-6, rtol=0)
  with pytest.raises(ValueError, match="lora is None"):
    lora.merge(base, s)


def test_logits_match_peft(tmp_path):
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  peft = pytest.importorskip("peft")
  hf_cfg = transformers.Qwen2Config(vocab_size=97, hidden_size=32, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2,
                                    intermediate_size=64, tie_word_embeddings=True)
  torch.manual_seed(0)
  hf = randomize(transformers.Qwen2ForCausalLM(hf_cfg).eval(), 0)
  path = str(tmp_path / "qwen2")
  hf.save_pretrained(path)
  targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
  pm = peft.get_peft_model(hf, peft.LoraConfig(r=4, lora_alpha=12, lora_dropout=0.0,
                                               target_modules=targets)).eval()
  g = torch.Generator().manual_seed(1)
  with torch.no_grad():
    for name, p in pm.named_parameters():
      if "lora_" in name:
        p.copy_(0.3 * torch.randn(p.shape, generator=g))
  want = hf_logits(pm, TOKENS, LEFT_MASK)
  base = load_hf(path)
  lc = lora.lora_config_from_peft(dict(r=4, lora_alpha=12, target_modules=targets))
  cfg = base.cfg.replace(lora=lc)
  tensors = {k: v.numpy() for k, v in pm.state_dict().items() if "lora_" in k}
  state = lora.from_peft(cfg, tensors, lora.attach(cfg, nnx.state(base)))
  ours = our_logits(nnx.merge(nnx.graphdef(nnx.eval_shape(
      lambda: Transformer(cfg, rngs=nnx.Rngs(0)))), state), TOKENS, LEFT_MASK)
  m = LEFT_MASK.astype(bool)
  np.testing.assert_allclose(ours[m], want[m], atol=1e-4, rtol=0)
  # The base alone differs (the adapters matter), and to_peft inverts from_peft.
  assert float(np.abs(our_logits(base, TOKENS, LEFT_MASK)[m] - want[m]).max()) > 1e-2
  out = lora.to_peft(cfg, state)
  assert set(out) == {k.replace(".default", "") for k in tensors}
  for k, v in tensors.items():
    np.testing.assert_array_equal(out[k.replace(".default", "")], v)
  assert lora.peft_adapter_config(cfg)["target_modules"] == targets
  # Our adapter directory, loaded by peft onto a fresh copy of the base: the same logits.
  adapter = str(tmp_path / "adapter")
  lora.save_peft(adapter, cfg, state, base_model_name_or_path=path)
  fresh = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
  loaded = peft.PeftModel.from_pretrained(fresh, adapter).eval()
  np.testing.assert_allclose(hf_logits(loaded, TOKENS, LEFT_MASK)[m], ours[m], atol=1e-4, rtol=0)
  with pytest.raises(ValueError, match="missing"):
    lora.from_peft(cfg, {k: v for k, v in tensors.items() if "layers.1.mlp.up" not in k},
                   state)


def test_bad_lora_config_names_the_field():
  for kw, field in [(dict(rank=0), "rank"), (dict(alpha=-1.0), "alpha"),
                    (dict(dropout=0.1), "dropout"), (dict(targets=("q", "qkv")), "targets"),
                    (dict(targets=()), "targets")]:
    with pytest.raises(ValueError, match=f"lora.{field}"):
      LoraConfig(**kw)
  with pytest.raises(ValueError, match="unknown keys"):
    ModelConfig(lora=dict(rank=2, scale=3.0))
  with pytest.raises(ValueError, match="ModelConfig.lora"):
    ModelConfig(lora=4)
  assert ModelConfig(lora=dict(rank=2, targets=["down", "q"])).lora.targets == ("q", "down")
