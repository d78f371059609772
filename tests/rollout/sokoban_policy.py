"""The real Sokoban env with a small trained sentencepiece tokenizer and a tiny random policy:
what the tests of the compiled rollout, the host bridge and episode rendering play."""
import jax
from flax import nnx

from agent_rl.rollout.episode import EpisodeConfig
from agent_rl.rollout.layout import chat_pieces
from agent_rl.rollout.policy import Policy
from agent_rl.rollout.sampler import SamplerConfig


def sokoban_setup(tok_dir: str, n_tasks: int, group_size: int):
  """`(tok, env, policy, params, cfg, tasks, pieces)`: a 6x6 one-box Sokoban, 3 turns of up to
  8 tokens, `n_tasks` tasks sampled from key 0; the tokenizer is trained into `tok_dir`."""
  from agent_rl.envs.sokoban import Sokoban
  from agent_rl.models.presets import get_preset
  from agent_rl.models.transformer import Transformer
  from agent_rl.tokenizers import Tokenizer, train_tokenizer
  rows = ["######", "#_OXP#", "#__√S#", "#_X__#", "#O___#"]
  texts = ["\n".join(rows[(i + j) % 5] for j in range(6)) + "\n" for i in range(50)]
  texts += [f"<answer>{w}</answer> system user assistant" for w in ("Up", "Down", "Left", "Right")]
  tok = Tokenizer.load(train_tokenizer(texts * 4, f"{tok_dir}/s.model", 340))
  env = Sokoban(tokenizer=tok, dim_room=(6, 6), num_boxes=1)
  mcfg = get_preset("tiny", vocab_size=tok.vocab_size, hidden=32, num_layers=1, num_heads=2,
                    num_kv_heads=1, head_dim=16, intermediate=64)
  graphdef, params = nnx.split(Transformer(mcfg, rngs=nnx.Rngs(0)))
  cfg = EpisodeConfig(sampler=SamplerConfig(max_tokens=8, stop_tokens=(tok.special("<|im_end|>"),
                                                                         tok.eos_id)),
                      max_turns=3, group_size=group_size)
  tasks = jax.vmap(env.sample_task)(jax.random.split(jax.random.PRNGKey(0), n_tasks))
  return (tok, env, Policy.from_model(mcfg, graphdef), params, cfg, tasks,
          chat_pieces(tok, env.instruction))
