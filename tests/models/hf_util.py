"""Helpers for the `transformers` parity tests: random HF models, their logits and ours."""
import jax.numpy as jnp
import numpy as np
from flax import nnx

from agent_rl.models import forward


def randomize(model, seed, zero_centred_norms=False):
  """Weights of unit-ish scale (HF init is std 0.02, too small to exercise the math).

  zero_centred_norms: norm weights ~ 0.1 N(0, 1) (Gemma's (1 + w) norms), else 1 + that.
  """
  import torch
  g = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for name, p in model.named_parameters():
      if name.endswith("norm.weight"):
        p.copy_((0.0 if zero_centred_norms else 1.0) + 0.1 * torch.randn(p.shape, generator=g))
      elif name.endswith("bias"):
        p.copy_(0.1 * torch.randn(p.shape, generator=g))
      else:
        p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
  return model


def hf_logits(model, tokens, mask):
  """HF logits [B, L, V] with positions cumsum(mask) - 1, as `generate` builds them."""
  import torch
  pos = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
  with torch.no_grad():
    out = model(input_ids=torch.tensor(np.asarray(tokens), dtype=torch.long),
                attention_mask=torch.tensor(np.asarray(mask), dtype=torch.long),
                position_ids=torch.tensor(pos, dtype=torch.long))
  return out.logits.float().numpy()


def our_logits(model, tokens, mask):
  graphdef, state = nnx.split(model)
  pos = jnp.maximum(jnp.cumsum(mask, axis=1) - 1, 0).astype(jnp.int32)
  return np.asarray(forward(graphdef, state, jnp.asarray(tokens, jnp.int32), pos,
                            jnp.asarray(mask, bool))[0])
