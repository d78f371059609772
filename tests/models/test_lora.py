"""LoRA: adapters on the seven projections, merge/unmerge, and parity with `peft` on a tiny
Qwen2 (same adapter weights -> same logits, float32, left-padded batch); LoRA dropout
against NumPy with the same Bernoulli masks and against PEFT's training-mode forward."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from agent_rl.models import (ModelConfig, Transformer, forward, init_cache, load_hf, lora,
                             prefill)
from agent_rl.models.attention import Attention
from agent_rl.models.layers import MLP
from agent_rl.models.lora import LoraConfig, LoRAParam

from conftest import init_model
from hf_util import hf_logits, our_logits, randomize

ALL = ("q", "k", "v", "o", "gate", "up", "down")
L = 9
TOKENS = np.random.default_rng(2).integers(0, 97, (3, L))
LEFT_MASK = np.array([[1] * L, [0] * 2 + [1] * (L - 2), [0] * 5 + [1] * (L - 5)])
P = 0.3  # LoRA dropout of the dropout tests
PEFT_DROPOUT = 0.25


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
  # float32: W + s*A@B is rounded once per weight, then summed over two layers; logits of
  # magnitude ~2 differ by up to ~1.4e-5 depending on XLA:CPU's GEMM blocking (CI, 2026-12-03).
  np.testing.assert_allclose(forward(g, merged, tokens, pos, ones)[0], adapted, atol=5e-5, rtol=0)
  back = lora.unmerge(cfg, merged, nnx.state(nnx.merge(g_l, state), LoRAParam))
  for (p, a), (q, b) in zip(nnx.to_flat_state(back), nnx.to_flat_state(state)):
    assert p == q
    np.testing.assert_allclose(np.asarray(a.get_value()), np.asarray(b.get_value()),
                               atol=1e-6, rtol=0)
  with pytest.raises(ValueError, match="lora is None"):
    lora.merge(base, s)


@pytest.fixture(scope="module")
def peft_qwen2(tmp_path_factory):
  """A tiny random Qwen2 saved as a HF dir and a PEFT model on it (all seven targets,
  lora_dropout=PEFT_DROPOUT, random A and B): (torch, transformers, peft, pm, path, targets)."""
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  peft = pytest.importorskip("peft")
  hf_cfg = transformers.Qwen2Config(vocab_size=97, hidden_size=32, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2,
                                    intermediate_size=64, tie_word_embeddings=True)
  torch.manual_seed(0)
  hf = randomize(transformers.Qwen2ForCausalLM(hf_cfg).eval(), 0)
  path = str(tmp_path_factory.mktemp("peft") / "qwen2")
  hf.save_pretrained(path)
  targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
  pm = peft.get_peft_model(hf, peft.LoraConfig(r=4, lora_alpha=12, lora_dropout=PEFT_DROPOUT,
                                               target_modules=targets)).eval()
  g = torch.Generator().manual_seed(1)
  with torch.no_grad():
    for name, p in pm.named_parameters():
      if "lora_" in name:
        p.copy_(0.3 * torch.randn(p.shape, generator=g))
  return torch, transformers, peft, pm, path, targets


def _ours_from_peft(pm, path, targets):
  """(our LoRA Transformer with PEFT's adapters, the plain base model)."""
  base = load_hf(path)
  lc = lora.lora_config_from_peft(dict(r=4, lora_alpha=12, lora_dropout=PEFT_DROPOUT,
                                       target_modules=targets))
  cfg = base.cfg.replace(lora=lc)
  tensors = {k: v.numpy() for k, v in pm.state_dict().items() if "lora_" in k}
  state = lora.from_peft(cfg, tensors, lora.attach(cfg, nnx.state(base)))
  model = nnx.merge(nnx.graphdef(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))),
                    state)
  return model, base, cfg, state, tensors


def test_logits_match_peft(peft_qwen2, tmp_path):
  """PEFT in eval mode (its lora_dropout inactive) = our forward without a dropout key."""
  torch, transformers, peft, pm, path, targets = peft_qwen2
  want = hf_logits(pm, TOKENS, LEFT_MASK)
  model, base, cfg, state, tensors = _ours_from_peft(pm, path, targets)
  assert cfg.lora.dropout == PEFT_DROPOUT
  ours = our_logits(model, TOKENS, LEFT_MASK)
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
                    (dict(dropout=-0.1), "dropout"), (dict(dropout=1.0), "dropout"),
                    (dict(dropout="0.1"), "dropout"), (dict(dropout=True), "dropout"),
                    (dict(dropout=float("nan")), "dropout"),
                    (dict(targets=("q", "qkv")), "targets"),
                    (dict(targets=()), "targets")]:
    with pytest.raises(ValueError, match=f"lora.{field}"):
      LoraConfig(**kw)
  with pytest.raises(ValueError, match="unknown keys"):
    ModelConfig(lora=dict(rank=2, scale=3.0))
  with pytest.raises(ValueError, match="ModelConfig.lora"):
    ModelConfig(lora=4)
  assert ModelConfig(lora=dict(rank=2, targets=["down", "q"])).lora.targets == ("q", "down")
  assert LoraConfig(dropout=0.05).dropout == 0.05 and LoraConfig(dropout=0).dropout == 0.0
  # A PEFT adapter trained with dropout loads (dropout is a training-only setting).
  lc = lora.lora_config_from_peft(dict(r=4, lora_alpha=8, lora_dropout=0.05,
                                       target_modules=["q_proj"]))
  assert lc.dropout == 0.05
  assert lora.peft_adapter_config(ModelConfig(lora=lc))["lora_dropout"] == 0.05


def _keep(layer_key, target, shape, p=P):
  """The keep-mask our convention draws for `target` from a layer's key (lora.delta)."""
  return np.asarray(jax.random.bernoulli(jax.random.fold_in(layer_key, lora.TARGETS.index(target)),
                                         1 - p, shape))


def _randomize_b(module, targets, seed):
  rng = np.random.default_rng(seed)
  for t in targets:
    b = getattr(module, f"{t}_lora_b")
    b.set_value(jnp.asarray(0.3 * rng.standard_normal(b.get_value().shape), jnp.float32))


def _ref_branch(module, t, h, scale, key):
  """NumPy h W + scale * (drop(h) A) B (2-D h; key None: no dropout)."""
  w, a, b = (np.asarray(getattr(module, n)[...], np.float64) for n in (t, f"{t}_lora_a",
                                                                       f"{t}_lora_b"))
  hin = h if key is None else h * _keep(key, t, h.shape) / (1 - P)
  w2 = w.reshape(-1, w.shape[-1]) if t == "o" else w.reshape(w.shape[0], -1)  # o: [H, D, E]
  return h @ w2 + scale * (hin @ a.reshape(-1, a.shape[-1])) @ b.reshape(b.shape[0], -1)


def test_dropout_is_inverted_bernoulli():
  x = jnp.asarray(np.random.default_rng(0).standard_normal((200, 50)), jnp.float32)
  k = jax.random.key(3)
  keep = np.asarray(jax.random.bernoulli(k, 1 - P, x.shape))
  np.testing.assert_allclose(lora.dropout(x, k, P), np.where(keep, np.asarray(x) / (1 - P), 0),
                             rtol=1e-6, atol=0)
  assert abs((~keep).mean() - P) < 0.02  # 10,000 draws: std 0.005


def test_mlp_dropout_drops_branch_inputs_only_numpy():
  """gate/up/down with dropout = the NumPy MLP whose LoRA branches read x * m / (1 - p) while
  the base products read x, with the masks of `lora.branch_key`'s convention."""
  lc = LoraConfig(rank=3, alpha=6.0, dropout=P, targets=("gate", "up", "down"))
  mlp = MLP(32, 64, dtype=jnp.float32, param_dtype=jnp.float32, rngs=nnx.Rngs(0), lora_cfg=lc)
  _randomize_b(mlp, ("gate", "up", "down"), 4)
  x = np.random.default_rng(5).standard_normal((6, 32))
  key = lora.branch_key(jax.random.key(7), 1, "q")  # any layer key
  outs = {}
  for k in (None, key):
    g, u = (_ref_branch(mlp, t, x, lc.scale, k) for t in ("gate", "up"))
    want = _ref_branch(mlp, "down", g / (1 + np.exp(-g)) * u, lc.scale, k)
    outs[k is None] = np.asarray(mlp(jnp.asarray(x, jnp.float32), k))
    np.testing.assert_allclose(outs[k is None], want, atol=2e-5, rtol=2e-5)
  assert np.abs(outs[True] - outs[False]).max() > 1e-2  # the masks matter


def test_attention_dropout_drops_branch_inputs_only_numpy(small_config):
  """q (input [E]) and o (input [H, D], flattened) projections with dropout vs NumPy."""
  cfg = small_config(lora=dict(rank=3, alpha=6.0, dropout=P, targets=ALL))
  attn = Attention(cfg, rngs=nnx.Rngs(0))
  _randomize_b(attn, ("q", "k", "v", "o"), 6)
  rng = np.random.default_rng(8)
  x, y = rng.standard_normal((6, 32)), rng.standard_normal((6, 4, 8))
  key = jax.random.key(9)
  for k in (None, key):
    q = attn._proj(jnp.asarray(x, jnp.float32), "q", k)
    np.testing.assert_allclose(q, _ref_branch(attn, "q", x, cfg.lora.scale, k).reshape(6, 4, 8),
                               atol=2e-5, rtol=2e-5)
    o = attn._out(jnp.asarray(y, jnp.float32), k)
    np.testing.assert_allclose(o, _ref_branch(attn, "o", y.reshape(6, 32), cfg.lora.scale, k),
                               atol=2e-5, rtol=2e-5)
  assert float(jnp.abs(attn._out(jnp.asarray(y, jnp.float32), key)
                       - attn._out(jnp.asarray(y, jnp.float32))).max()) > 1e-2


def test_dropout_keys_and_paths(small_config):
  """Same key -> same logits, another step's key -> others; scanned (remat) layers draw the
  same masks; zero B -> dropout changes nothing (the base path never drops); without a key
  (evaluation) and on the cached path (rollouts) the model is the p = 0 model."""
  lc = LoraConfig(rank=3, alpha=6.0, dropout=P, targets=ALL)
  cfg = small_config(lora=lc)
  cfg0 = cfg.replace(lora=LoraConfig(rank=3, alpha=6.0, dropout=0.0, targets=ALL))
  g, s = init_model(cfg)  # B random too
  gdef = lambda c: nnx.graphdef(nnx.eval_shape(lambda: Transformer(c, rngs=nnx.Rngs(0))))
  g0, g_remat = gdef(cfg0), gdef(cfg.replace(remat="block"))
  tokens = jnp.asarray(TOKENS, jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), tokens.shape)
  ones = jnp.ones(tokens.shape, bool)
  fwd = jax.jit(lambda gd, st, key: nnx.merge(gd, st).apply(tokens, pos, ones, dropout_key=key)[0],
                static_argnums=0)
  step_key = lambda i: jax.random.fold_in(jax.random.key(0), i)  # train_step: fold_in(rng, step)
  a = fwd(g, s, step_key(1))
  np.testing.assert_array_equal(a, fwd(g, s, step_key(1)))
  assert float(jnp.abs(a - fwd(g, s, step_key(2))).max()) > 1e-2
  np.testing.assert_allclose(fwd(g_remat, s, step_key(1)), a, atol=1e-5, rtol=0)
  # Mixed layer types (Gemma 3) take the unrolled nnx.remat path: the same masks too.
  mixed = cfg.replace(sliding_window=4, layer_types=("sliding", "full"))
  np.testing.assert_allclose(fwd(gdef(mixed.replace(remat="block")), s, step_key(1)),
                             fwd(gdef(mixed), s, step_key(1)), atol=1e-5, rtol=0)
  plain = forward(g0, s, tokens, pos, ones)[0]
  assert float(jnp.abs(a - plain).max()) > 1e-2
  np.testing.assert_array_equal(forward(g, s, tokens, pos, ones)[0], plain)
  np.testing.assert_array_equal(fwd(g0, s, step_key(1)), plain)  # p = 0 ignores the key
  fresh = lora.attach(cfg, init_model(small_config())[1])  # B = 0
  np.testing.assert_array_equal(fwd(g, fresh, step_key(1)), forward(g, fresh, tokens, pos, ones)[0])
  # The rollout's cached path (prefill; decode shares its projections) never drops.
  np.testing.assert_array_equal(prefill(g, s, tokens, pos, ones, init_cache(cfg, 3, L))[0],
                                prefill(g0, s, tokens, pos, ones, init_cache(cfg, 3, L))[0])
  with pytest.raises(ValueError, match="never drop"):
    nnx.merge(g, s).apply(tokens, pos, ones, init_cache(cfg, 3, L), dropout_key=step_key(0))


def test_zero_dropout_traces_no_rng(small_config):
  """p = 0: the forward given a key traces the very program without one (no RNG op)."""
  tokens = jnp.asarray(TOKENS, jnp.int32)
  pos = jnp.broadcast_to(jnp.arange(L, dtype=jnp.int32), tokens.shape)
  ones = jnp.ones(tokens.shape, bool)
  for p in (0.0, P):
    g, s = init_model(small_config(lora=dict(rank=2, dropout=p, targets=ALL)))
    trace = lambda use: str(jax.make_jaxpr(lambda st, key: nnx.merge(g, st).apply(
        tokens, pos, ones, dropout_key=key if use else None)[0])(s, jax.random.key(0)))
    with_key = trace(True)
    assert (with_key == trace(False)) == (p == 0)
    assert ("random_bits" in with_key) == (p > 0)


def test_training_mode_matches_peft_with_the_same_masks(peft_qwen2):
  """PEFT in training mode, each `lora_dropout` module replaced by one applying our mask of
  that layer and projection: the same logits as our forward with the dropout key."""
  torch, _, _, pm, path, targets = peft_qwen2
  model = _ours_from_peft(pm, path, targets)[0]
  key = jax.random.key(11)
  b, l = TOKENS.shape

  class MaskDropout(torch.nn.Module):
    def __init__(self, keep):
      super().__init__()
      self.keep = keep

    def forward(self, x):
      return x * self.keep / (1 - PEFT_DROPOUT) if self.training else x

  short = {v[1]: k for k, v in lora._TARGET_INFO.items()}
  originals = []
  for name, mod in pm.named_modules():
    if hasattr(mod, "lora_dropout") and "default" in getattr(mod, "lora_dropout", {}):
      i = int(name.split(".layers.")[1].split(".")[0])
      t = short[name.split(f".layers.{i}.")[1]]
      fan_in = mod.in_features
      keep = _keep(jax.random.fold_in(key, i), t, (b * l, fan_in), PEFT_DROPOUT)
      originals.append((mod, mod.lora_dropout["default"]))
      mod.lora_dropout["default"] = MaskDropout(torch.tensor(keep.reshape(b, l, fan_in),
                                                             dtype=torch.float32))
  assert len(originals) == 2 * len(targets)
  assert isinstance(originals[0][1], torch.nn.Dropout)  # PEFT's own, replaced by our masks
  pm.train()
  try:
    want = hf_logits(pm, TOKENS, LEFT_MASK)
  finally:
    pm.eval()
    for mod, orig in originals:
      mod.lora_dropout["default"] = orig
  pos = jnp.maximum(jnp.cumsum(LEFT_MASK, axis=1) - 1, 0).astype(jnp.int32)
  ours = np.asarray(model.apply(jnp.asarray(TOKENS, jnp.int32), pos, jnp.asarray(LEFT_MASK, bool),
                                dropout_key=key)[0])
  m = LEFT_MASK.astype(bool)
  np.testing.assert_allclose(ours[m], want[m], atol=1e-4, rtol=0)
  assert float(np.abs(ours[m] - our_logits(model, TOKENS, LEFT_MASK)[m]).max()) > 1e-2
