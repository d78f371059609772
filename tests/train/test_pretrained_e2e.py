"""A pretrained HF checkpoint end to end: a locally built Qwen2-style directory (byte-level BPE
tokenizer.json, Qwen2.5 chat template, random `transformers` Qwen2 weights) is the starting
point of a few Sokoban RL iterations (`model.init_from=DIR`), and the run exports back to a
directory `transformers` loads with our logits (issue 17 §4 CLI, §7).

References: `transformers.Qwen2ForCausalLM` (the initial weights and the exported ones),
`transformers.AutoTokenizer` (the vocabulary the run used).
"""
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agent_rl import export
from agent_rl.tokenizers import templates
from agent_rl.tokenizers.hf_train import train_hf_tokenizer
from agent_rl.train import phases, pretrained
from agent_rl.train import run as run_lib
from agent_rl.train.setup import SYSTEM_PROMPT, env_corpus
from tests.train.tiny import tiny_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ENV_KW = dict(max_steps=6)


def build_hf_dir(path: str, *, seed: int = 0) -> str:
  """A hub-format Qwen2 checkpoint: tokenizer trained on Sokoban text, random tiny weights."""
  train_hf_tokenizer(env_corpus("sokoban", ENV_KW, num_tasks=16), path, 400, style="qwen2",
                     chat_template=templates.TEMPLATES["qwen2.5"])
  hf_tok = transformers.AutoTokenizer.from_pretrained(path)
  torch.manual_seed(seed)
  cfg = transformers.Qwen2Config(
      vocab_size=len(hf_tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
      num_key_value_heads=1, intermediate_size=64, max_position_embeddings=512,
      tie_word_embeddings=True, rms_norm_eps=1e-6)
  model = transformers.Qwen2ForCausalLM(cfg)
  with torch.no_grad():  # larger than the default init, so logits differ visibly between steps
    for p in model.parameters():
      if p.dim() > 1:
        p.normal_(0.0, 0.2)
  model.save_pretrained(path, safe_serialization=True)
  return path


def e2e_config(hf_dir: str, iterations: int):
  c = tiny_config(iterations=iterations, ckpt_every=1)
  c.env.kwargs.max_steps = ENV_KW["max_steps"]
  c.model.init_from = hf_dir
  c.model.dtype = c.model.param_dtype = "float32"
  c.tokenizer.path = ""  # the checkpoint's own tokenizer (setup.tokenizer_path)
  c.optim.lr = 1e-2  # big steps: the final params must differ from the HF init
  # Equal rewards in a group give GRPO zero advantages; the entropy term always has a gradient.
  c.loss.entropy_coef = 0.01
  c.log.episodes = 0
  return c


def hf_logprobs(model, tokens: np.ndarray) -> np.ndarray:
  """[N, L] log p(tokens[t] | tokens[<t]) from a transformers model (position 0: 0)."""
  with torch.no_grad():
    logits = model(torch.tensor(tokens, dtype=torch.long)).logits.double()
  lp = torch.log_softmax(logits[:, :-1], -1).gather(-1, torch.tensor(tokens[:, 1:, None]))
  return np.concatenate([np.zeros((tokens.shape[0], 1)), lp[..., 0].numpy()], axis=1)


def our_logits(workdir: str, tokens: np.ndarray, which: str = "latest") -> np.ndarray:
  from flax import nnx
  from agent_rl.parallel.placement import make_placement
  c = pretrained.load_run_config(workdir)
  tok = export.run_tokenizer(workdir, c)
  place = make_placement(export._one_device_mesh(c))
  with place.context():
    rp = pretrained.load_run_policy(workdir, tok.vocab_size, place, which=which)
    lm = nnx.merge(rp.lm_graphdef, rp.params)
    return np.asarray(lm(jnp.asarray(tokens)))  # [N, L, V] f32


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
  return build_hf_dir(str(tmp_path_factory.mktemp("hf") / "qwen2-tiny"))


def run_from_hf(hf_dir, root, *, iterations: int, max_turns: int, lora_rank: int = 0):
  """(hf_dir, workdir, seen) of a run from `hf_dir`; `seen` holds the run's tokenizer and its
  first rollout batch (spied on, not recomputed)."""
  workdir = str(root / "run")
  seen = {}
  orig_batch = phases.rl_batch

  def spy_batch(run, prog, it):
    out = orig_batch(run, prog, it)
    seen.setdefault("batch", jax.device_get(out[2]))
    seen.setdefault("tokenizer", run.setup.tokenizer)
    return out

  c = e2e_config(hf_dir, iterations)
  c.rollout.max_turns = max_turns
  if lora_rank:
    c.model.lora.rank, c.model.lora.alpha, c.model.lora.targets = lora_rank, 8.0, "q,v,o,up"
  mp = pytest.MonkeyPatch()
  mp.setattr(phases, "rl_batch", spy_batch)
  try:
    run_lib.run(c, workdir)
  finally:
    mp.undo()
  return hf_dir, workdir, seen


@pytest.fixture(scope="module")
def small_run(hf_dir, tmp_path_factory):
  """One iteration of one turn: the non-slow round trip (~1 min on 2 quiet cores)."""
  return run_from_hf(hf_dir, tmp_path_factory.mktemp("e2e_small"), iterations=1, max_turns=1)


@pytest.fixture(scope="module")
def full_run(hf_dir, tmp_path_factory):
  """Three RL iterations of two turns (slow)."""
  return run_from_hf(hf_dir, tmp_path_factory.mktemp("e2e_full"), iterations=3, max_turns=2)


@pytest.fixture(scope="module")
def lora_run(hf_dir, tmp_path_factory):
  """Two RL iterations with LoRA adapters on the HF weights (slow)."""
  return run_from_hf(hf_dir, tmp_path_factory.mktemp("e2e_lora"), iterations=2, max_turns=1,
                     lora_rank=4)


def check_started_from_hf(hf_dir, workdir, seen):
  """The run used the dir's tokenizer (vocab, ids, template) and weights (first rollout)."""
  tok = seen["tokenizer"]
  hf_tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
  assert tok.vocab_size == len(hf_tok)
  text = "<|im_start|>user\nPush the box left.<|im_end|>\n"
  assert list(tok.encode(text)) == hf_tok(text)["input_ids"]
  with open(os.path.join(workdir, "config.json")) as f:
    assert json.load(f)["model"]["init_from"] == hf_dir
  # The first rollout ran under the HF init: its behaviour log-probs (temperature 1, no
  # top-k/p) are transformers' log-probs of the same tokens.
  b = seen["batch"]
  tokens, mask = np.asarray(b.tokens), np.asarray(b.loss_mask, bool)
  assert mask.sum() > 0
  ref = hf_logprobs(transformers.AutoModelForCausalLM.from_pretrained(hf_dir), tokens)
  np.testing.assert_allclose(np.asarray(b.logprobs)[mask], ref[mask], atol=2e-4)
  # The prompt is the checkpoint's template: episodes start with its rendered system turn.
  system = hf_tok.apply_chat_template([{"role": "system", "content": SYSTEM_PROMPT}],
                                      tokenize=False)
  ids = hf_tok(system)["input_ids"]
  assert [list(row[:len(ids)]) for row in tokens] == [ids] * len(tokens)


def check_export(hf_dir, workdir, seen, out):
  """`out` (the export of `workdir`) loads in transformers with our logits, moved by RL."""
  with open(os.path.join(out, "config.json")) as f:
    assert json.load(f)["model_type"] == "qwen2"
  exported = transformers.AutoModelForCausalLM.from_pretrained(out)
  tokens = np.asarray(seen["batch"].tokens)[:2, :48]
  with torch.no_grad():
    theirs = exported(torch.tensor(tokens, dtype=torch.long)).logits.numpy()
  ours = our_logits(workdir, tokens)
  np.testing.assert_allclose(theirs, ours, atol=1e-4)
  initial = transformers.AutoModelForCausalLM.from_pretrained(hf_dir)
  with torch.no_grad():
    before = initial(torch.tensor(tokens, dtype=torch.long)).logits.numpy()
  assert np.abs(before - theirs).max() > 1e-3, "RL did not move the weights"
  # The run's tokenizer and chat template travel with the export.
  t_out, t_in = (transformers.AutoTokenizer.from_pretrained(d) for d in (out, hf_dir))
  conv = [{"role": "user", "content": "Push the box."}]
  assert t_out.apply_chat_template(conv, tokenize=False) == t_in.apply_chat_template(
      conv, tokenize=False)
  assert t_out("Push the box left.")["input_ids"] == t_in("Push the box left.")["input_ids"]


def test_small_run_round_trip(small_run, tmp_path):
  hf_dir, workdir, seen = small_run
  check_started_from_hf(hf_dir, workdir, seen)
  out = str(tmp_path / "export")
  info = export.export_run(workdir, out, which="latest")
  assert info["family"] == "qwen2" and info["checkpoint_step"] == 1
  check_export(hf_dir, workdir, seen, out)


@pytest.mark.slow
def test_e2e_three_iterations_and_cli(full_run, tmp_path):
  hf_dir, workdir, seen = full_run
  check_started_from_hf(hf_dir, workdir, seen)
  out = str(tmp_path / "export")
  env = dict(os.environ, PYTHONPATH=os.getcwd(), JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-m", "agent_rl.export", f"--workdir={workdir}",
                         f"--out={out}", "--checkpoint=latest"], capture_output=True, text=True,
                        env=env, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  info = json.loads(proc.stdout[proc.stdout.index("{"):])
  assert info["family"] == "qwen2" and info["checkpoint_step"] == 3
  check_export(hf_dir, workdir, seen, out)


@pytest.mark.slow
def test_lora_run_exports_adapter_and_merged(lora_run, tmp_path):
  """LoRA from a HF dir: starts at the base (B = 0), trains only adapters; the PEFT adapter
  on the untouched base and the merged export both give our final logits."""
  peft = pytest.importorskip("peft")
  hf_dir, workdir, seen = lora_run
  check_started_from_hf(hf_dir, workdir, seen)
  tokens = np.asarray(seen["batch"].tokens)[:2, :48]
  ours = our_logits(workdir, tokens)
  base = transformers.AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
  with torch.no_grad():
    before = base(torch.tensor(tokens, dtype=torch.long)).logits.numpy()
  assert np.abs(before - ours).max() > 1e-3, "RL did not move the adapters"
  adapter = str(tmp_path / "adapter")
  info = export.export_run(workdir, adapter, which="latest", lora_mode="adapter")
  assert "adapter_model.safetensors" in info["files"]
  loaded = peft.PeftModel.from_pretrained(base, adapter).eval()
  with torch.no_grad():
    theirs = loaded(torch.tensor(tokens, dtype=torch.long)).logits.numpy()
  np.testing.assert_allclose(theirs, ours, atol=1e-4)
  merged = str(tmp_path / "merged")
  export.export_run(workdir, merged, which="latest", lora_mode="merged")
  m = transformers.AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32)
  with torch.no_grad():
    np.testing.assert_allclose(m(torch.tensor(tokens, dtype=torch.long)).logits.numpy(), ours,
                               atol=1e-4)


def test_export_errors_name_the_workdir(tmp_path, small_run):
  with pytest.raises(FileNotFoundError, match="config.json"):
    export.export_run(str(tmp_path), str(tmp_path / "o"))
  with pytest.raises(FileNotFoundError, match="not a directory"):
    export.export_run(str(tmp_path / "nope"), str(tmp_path / "o"))
  _, workdir, _ = small_run
  with pytest.raises(ValueError, match="--lora"):
    export.export_run(workdir, str(tmp_path / "o"), lora_mode="both")
  with pytest.raises(ValueError, match="no LoRA adapters"):
    export.export_run(workdir, str(tmp_path / "o"), lora_mode="adapter")
  with pytest.raises(ValueError, match="workdir"):
    export.export_run(workdir, workdir)


@pytest.mark.parametrize("name,hf_preset", [("ragen_sokoban", "qwen2.5-0.5b"),
                                            ("gigpo_sokoban", "qwen2.5-1.5b")])
def test_full_configs_take_model_and_tokenizer_from_init_from(name, hf_preset, hf_dir, tmp_path):
  """`:full --config.model.init_from=DIR`: validates; the model config is DIR's config.json
  (not the preset), the tokenizer and the prompt pieces are DIR's (its chat template)."""
  import importlib.util
  from agent_rl.models.hf_import import config_from_hf
  from agent_rl.train.config import validate
  from agent_rl.train.setup import build, tokenizer_path
  path = os.path.join(os.path.dirname(__file__), "..", "..", "configs", name + ".py")
  spec = importlib.util.spec_from_file_location(name, path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  assert "--config.model.init_from=" in mod.__doc__ and "agent_rl.export" in mod.__doc__
  c = mod.get_config("full")
  assert c.model.preset == hf_preset and c.sft.steps == 0
  c.model.init_from = hf_dir
  c.mesh.num_devices = 1
  validate(c)
  assert tokenizer_path(c) == hf_dir
  setup = build(c, str(tmp_path))
  want, _ = config_from_hf(hf_dir, dtype="bfloat16", param_dtype="float32")
  assert setup.model_cfg == want.replace(remat=c.model.remat)
  assert setup.model_cfg.hidden == 32 and setup.model_cfg.vocab_size == setup.tokenizer.vocab_size
  hf_tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
  system = hf_tok.apply_chat_template([{"role": "system", "content": SYSTEM_PROMPT}],
                                      tokenize=False)
  ids = hf_tok(system)["input_ids"]
  assert list(setup.pieces.first[:len(ids)]) == ids
