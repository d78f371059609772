"""Config validation: every bad field fails at start-up with the field's name; variants,
command-line kwargs and their signature check (issue 16 §4)."""
import glob
import importlib.util
import inspect
import os
import subprocess
import sys

import pytest

from agent_rl.train.config import base_config, validate
from agent_rl.train.variants import parse_variants
from tests.train.tiny import ROOT, child_env


def _cfg(**over):
  c = base_config()
  for path, v in over.items():
    node = c
    *parents, leaf = path.split(".")
    for p in parents:
      node = node[p]
    node[leaf] = v
  return c


def test_base_config_is_valid():
  validate(base_config())


@pytest.mark.parametrize("field,value,needle", [
    ("model.preset", "gpt-9", "model.preset"),
    ("env.name", "chess", "env.name"),
    ("credit.name", "magic", "credit.name"),
    ("loss.name", "nope", "loss.name"),
    ("loss.agg_mode", "token-sum", "loss.agg_mode"),
    ("rollout.history", "both", "rollout.history"),
    ("rollout.top_p", 0.0, "rollout.top_p"),
    ("rollout.group_size", 0, "rollout.group_size"),
    ("train.minibatch_episodes", 7, "train.minibatch_episodes"),
    ("optim.lr", 0.0, "optim.lr"),
    ("optim.schedule", "linear", "optim.schedule"),
    ("sft.schedule", "linear", "sft.schedule"),
    ("sft.warmup_steps", -1, "sft.warmup_steps"),
    ("sft.lr", 0.0, "sft.lr"),
    ("rm.schedule", "linear", "rm.schedule"),
    ("rm.warmup_steps", 200, "rm.warmup_steps"),  # rm.steps is 200: no update would train
    ("model.critic", "twin", "model.critic"),
    ("model.dtype", "fp8", "model.dtype"),
    ("model.param_dtype", "float64", "model.param_dtype"),
    ("eval.slice_tasks", 7, "eval.slice_tasks"),  # does not divide eval.num_tasks = 64
    ("eval.slice_tasks", -2, "eval.slice_tasks"),
    ("model.attention_block", -1, "model.attention_block"),
    ("model.prefill_chunk", -1, "model.prefill_chunk"),
])
def test_bad_values_name_the_field(field, value, needle):
  with pytest.raises(ValueError, match=needle.replace(".", r"\.")):
    validate(_cfg(**{field: value}))


def test_wrong_type_override_fails_with_field_name():
  c = base_config()
  with pytest.raises(TypeError, match="lr"):
    c.optim.lr = "fast"


def test_model_dtype_overrides_reach_the_model_config():
  from agent_rl.train.setup import model_config
  c = _cfg(**{"model.dtype": "bfloat16", "model.param_dtype": "float32"})
  validate(c)
  m = model_config(c, vocab_size=64)
  assert (m.dtype, m.param_dtype) == ("bfloat16", "float32")
  assert model_config(base_config(), vocab_size=64).dtype == "float32"


# --- variants (`get_config("tiny,ppo")`) -------------------------------------------------------

CONFIGS = sorted(glob.glob(os.path.join(ROOT, "configs", "*.py")))


def _load(path):
  spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


@pytest.mark.parametrize("path", CONFIGS, ids=[os.path.basename(p) for p in CONFIGS])
def test_every_config_rejects_an_unknown_variant_listing_the_known(path):
  mod = _load(path)
  with pytest.raises(ValueError, match="unknown variant 'ppp'") as e:
    mod.get_config("tiny,ppp")
  for word in ("tiny", "full", *mod.VARIANTS):
    assert word in str(e.value)
  # each declared one parses (a typed variant at its default value)
  for arg in (None, "tiny", *(f"tiny,{v}" if isinstance(d, bool) else f"tiny,{v}={d}"
                              for v, d in mod.VARIANTS.items())):
    c = mod.get_config(arg)
    c.mesh.num_devices = 1
    validate_but_recipe_runs(c, getattr(mod, "COMPARISON", None))


def validate_but_recipe_runs(c, comparison):
  """validate(c) with the row's overrides; a run directory its docstring recipe creates (a
  path field the overrides name, absent from a clean checkout) may be the only complaint."""
  from agent_rl.eval.reproduce.runs import PATH_FIELDS, apply_override
  missing = []
  for k, v in (comparison.overrides.items() if comparison is not None else ()):
    apply_override(c, k, v)
    if k in PATH_FIELDS and not os.path.exists(v):
      missing.append(k)
  try:
    validate(c)
  except ValueError as e:
    if not any(str(e).startswith(f"config.{k}:") for k in missing):
      raise


def test_variant_switch_changes_the_config():
  mod = _load(os.path.join(ROOT, "configs", "ragen_sokoban.py"))
  assert mod.get_config("tiny").credit.name == "grpo"
  c = mod.get_config("tiny,ppo")
  assert (c.credit.name, c.model.critic) == ("gae", "shared")
  assert mod.get_config("full").scale == "full"


def test_parse_variants_switches_typed_values_and_errors():
  known = dict(ppo=False, ratio=0.25, steps=3, name="a")
  v = parse_variants("full, ppo,ratio=0.5,steps=7,name=b", known)
  assert (v.scale, "ppo" in v, v["ratio"], v["steps"], v["name"]) == ("full", True, 0.5, 7, "b")
  assert isinstance(v["steps"], int) and isinstance(v["ratio"], float)
  v = parse_variants(None, known)
  assert (v.scale, "ppo" in v, v["ratio"]) == ("tiny", False, 0.25)
  assert "ppo" not in parse_variants("ppo=false", known)
  with pytest.raises(ValueError, match=r"'ratio' takes a float, got 'high'"):
    parse_variants("ratio=high", known)
  with pytest.raises(ValueError, match=r"'ratio' needs a value"):
    parse_variants("ratio", known)
  with pytest.raises(ValueError, match="several scales"):
    parse_variants("tiny,full", known)
  with pytest.raises(ValueError, match="known: tiny, full, name=<str>, ppo, ratio=<float>"):
    parse_variants("tiny,ppp", known)
  with pytest.raises(KeyError, match="'ppoo' is not declared"):  # a typo inside a config file
    "ppoo" in parse_variants("tiny", known)  # noqa: B015


# --- kwargs from the command line (`--config.credit.kwargs.gamma=0.95`) --------------------------

def _parse_flags(monkeypatch, *overrides, config="configs/ragen_sokoban.py:tiny"):
  """Runs the train entry point's --config flag parsing in-process on a fresh FlagValues."""
  from absl import flags
  from agent_rl.train.cli import define_config_flag
  fv = flags.FlagValues()
  holder = define_config_flag(flag_values=fv)
  argv = ["train", f"--config={os.path.join(ROOT, config)}", *overrides]
  monkeypatch.setattr(sys, "argv", argv)  # config_flags reads the overrides from sys.argv
  fv(argv)
  c = holder.value
  c.mesh.num_devices = 1
  return c


def test_cli_sets_registered_kwargs_with_literal_types(monkeypatch):
  c = _parse_flags(monkeypatch, "--config.credit.name=gigpo", "--config.credit.kwargs.gamma=0.95",
                   "--config.credit.kwargs.step_weight=2", "--config.credit.kwargs.norm=std_norm",
                   "--config.credit.kwargs.cross_steps=false", "--config.env.kwargs.dim_room=(5,5)",
                   "--config.env.kwargs.reward_weights=[1.0, 2.0]",
                   "--config.loss.kwargs.clip_ratio_high=0.3", "--config.optim.lr=1e-5")
  kw = c.credit.kwargs
  assert (kw.gamma, kw.step_weight, kw.norm, kw.cross_steps) == (0.95, 2, "std_norm", False)
  assert type(kw.step_weight) is int and type(kw.cross_steps) is bool
  assert c.env.kwargs.dim_room == (5, 5) and c.env.kwargs.reward_weights == [1.0, 2.0]
  assert (c.loss.kwargs.clip_ratio_high, c.optim.lr) == (0.3, 1e-5)
  validate(c)
  c = _parse_flags(monkeypatch, "--config.credit.name=gigpo", "--noconfig.credit.kwargs.cross_steps")
  assert c.credit.kwargs.cross_steps is False


def test_cli_can_drop_the_config_files_kwargs(monkeypatch):
  over = ("--config.credit.name=grpo",)
  with pytest.raises(ValueError, match=r"config\.credit\.kwargs: credit kernel 'grpo' takes no "
                                       r"keyword 'gamma', 'norm', 'step_weight'.*kwargs='\{\}'"):
    validate(_parse_flags(monkeypatch, *over, config="configs/gigpo_sokoban.py:tiny"))
  c = _parse_flags(monkeypatch, "--config.credit.kwargs={}", *over,
                   "--config.credit.kwargs.norm_by_std=false", config="configs/gigpo_sokoban.py:tiny")
  assert dict(c.credit.kwargs) == {"norm_by_std": False}
  validate(c)


def test_cli_keeps_field_types_and_rejects_unknown_fields(monkeypatch):
  from absl import flags
  with pytest.raises(flags.IllegalFlagValueError, match="lr"):
    _parse_flags(monkeypatch, "--config.optim.lr=fast")
  c = _parse_flags(monkeypatch, "--config.train.iteratons=5")  # parses: a new key ...
  with pytest.raises(ValueError, match=r"config\.train\.iteratons: unknown field; .*iterations"):
    validate(c)  # ... that start-up rejects, naming it


def test_entry_point_rejects_a_wrong_kwarg_before_compiling(tmp_path):
  env = child_env()
  p = subprocess.run([sys.executable, "-m", "agent_rl.train",
                      "--config=configs/ragen_sokoban.py:tiny", f"--workdir={tmp_path}",
                      "--config.credit.name=gigpo", "--config.credit.kwargs.gama=0.95"],
                     cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert p.returncode != 0
  assert "credit kernel 'gigpo' takes no keyword 'gama'; it takes: cross_steps, eps, gamma" in p.stderr
  assert not os.listdir(tmp_path)  # nothing written: it failed at validate


# --- kwargs checked against the function's signature ---------------------------------------------

def _keyword_only(fn):  # the reference: what the signature says, minus what the run supplies
  return sorted(n for n, p in inspect.signature(fn).parameters.items()
                if p.kind is p.KEYWORD_ONLY or (p.default is not p.empty and p.kind is not p.VAR_KEYWORD))


@pytest.mark.parametrize("field,name_field,name,bad", [
    ("credit.kwargs", "credit.name", "gigpo", "gama"),
    ("loss.kwargs", "loss.name", "gspo", "clip_ratio_c"),
    ("env.kwargs", "env.name", "sokoban", "size"),
    ("rollout.strategy_kwargs", "rollout.strategy", "starpo_s", "ratoi"),
])
def test_wrong_kwarg_names_the_function_and_lists_what_it_takes(field, name_field, name, bad):
  from agent_rl import credit, envs, losses
  from agent_rl.rollout.strategies import STRATEGIES
  reg = {"credit": credit.CREDIT, "loss": losses.LOSSES, "env": envs.ENVS,
         "rollout": STRATEGIES}[field.split(".")[0]]
  c = _cfg(**{name_field: name})
  c.mesh.num_devices = 1
  node = c
  for p in field.split("."):
    node = node[p]
  node[bad] = 1.0
  with pytest.raises(ValueError) as e:
    validate(c)
  msg = str(e.value)
  assert msg.startswith(f"config.{field}: ") and f"{name!r} takes no keyword {bad!r}" in msg
  obj = reg.get(name)
  if field.startswith("rollout"):
    takes = sorted(set(_keyword_only(obj.configure_fn)) | set(_keyword_only(obj.run_fn)))
  else:
    supplied = {"env": {"tokenizer"}, "loss": {"loss_agg_mode", "key", "turn_index", "weights",
                                               "num_tokens", "num_seqs"}}.get(field.split(".")[0], set())
    takes = [k for k in _keyword_only(obj) if k not in supplied]
  assert takes and f"it takes: {', '.join(takes)}" in msg


def test_kwargs_the_run_supplies_are_rejected():
  c = _cfg(**{"loss.kwargs.loss_agg_mode": "token-mean"})
  with pytest.raises(ValueError, match="loss_agg_mode: set by the caller"):
    validate(c)
  c = _cfg(**{"env.kwargs.tokenizer": "x"})
  with pytest.raises(ValueError, match=r"config\.env\.kwargs: .*tokenizer: set by the caller"):
    validate(c)


def test_valid_kwargs_pass():
  validate(_cfg(**{"credit.name": "gigpo", "credit.kwargs.gamma": 0.9, "loss.kwargs.scale": 64.0,
                   "rollout.strategy": "dapo", "rollout.strategy_kwargs.max_num_gen_batches": 3,
                   "env.kwargs.num_boxes": 2, "mesh.num_devices": 1}))


def test_strategy_hooks_get_only_their_kwargs_and_reject_others():
  from agent_rl.rollout.episode import EpisodeConfig
  from agent_rl.rollout.strategies import STRATEGIES
  cfg = EpisodeConfig(sampler=None, max_turns=4, group_size=2)
  gate = STRATEGIES.get("selective_gate")
  assert gate.configure(cfg, turn=3).gate.turn == 3
  assert gate.run(lambda p, t, k: ("batch", {}), None, None, None, turn=3) == ("batch", {})
  starpo = STRATEGIES.get("starpo_s")
  assert starpo.configure(cfg, ratio=0.5) is cfg  # run's keyword does not reach configure
  with pytest.raises(TypeError, match="takes no keyword 'ratoi'; it takes: filter_type, ratio"):
    starpo.configure(cfg, ratoi=0.5)
  with pytest.raises(TypeError, match="'ratoi'"):
    starpo.run(lambda p, t, k: None, None, None, None, ratoi=0.5)
  from agent_rl.rollout.strategies import Strategy
  loose = Strategy(run_fn=lambda rollout_fn, params, tasks, key, **kw: kw)  # **kw: it decides
  assert loose.keyword_params() is None and loose.run(None, None, None, None, a=1) == {"a": 1}


def test_registry_check_kwargs_generic():
  from agent_rl.registry import Registry
  r = Registry("widget")
  r.register("a", lambda x, y=1, *, z=2: None)
  r.register("b", lambda x, **kw: None)
  assert r.keyword_params("a") == ["y", "z"] and r.keyword_params("b") is None
  r.check_kwargs("a", {"y": 0, "z": 0}, "config.w")
  r.check_kwargs("b", {"anything": 0}, "config.w")  # **kwargs: the function decides
  with pytest.raises(ValueError, match=r"^config\.w: widget 'a' takes no keyword 'q'; it takes: y, z$"):
    r.check_kwargs("a", {"q": 0}, "config.w")
  with pytest.raises(ValueError, match="'x'.*set by the caller"):
    r.check_kwargs("b", {"x": 0}, "config.w", supplied=("x",))


# --- other start-up errors --------------------------------------------------------------------------

def test_unknown_kl_type_lists_the_estimators():
  with pytest.raises(ValueError, match=r"config\.loss\.kl_type: unknown KL estimator 'k4'; known: "
                                       r"abs, k1, k2, k3, kl, low_var_kl, mse"):
    validate(_cfg(**{"loss.kl_type": "k4"}))
  validate(_cfg(**{"loss.kl_type": "k1+", "mesh.num_devices": 1}))  # straight-through variant


@pytest.mark.parametrize("kernel", ["gae", "bilevel_gae"])
def test_critic_kernel_without_a_critic_is_an_error(kernel):
  with pytest.raises(ValueError, match=rf"config\.credit\.name: credit kernel '{kernel}' needs "
                                       "critic values but config.model.critic is 'none'"):
    validate(_cfg(**{"credit.name": kernel}))
  validate(_cfg(**{"credit.name": kernel, "model.critic": "shared", "mesh.num_devices": 1}))


def test_unknown_or_missing_fields_are_errors():
  import ml_collections as mlc
  c = base_config()
  c.train.iteratons = 5  # configs are unlocked while built: a typo adds a field
  with pytest.raises(ValueError, match=r"config\.train\.iteratons: unknown field"):
    validate(c)
  c = base_config()
  c.mesh.dcn = mlc.ConfigDict(dict(data=2))
  with pytest.raises(ValueError, match=r"config\.mesh\.dcn\.fsdp: missing"):
    validate(c)


def test_readme_running_experiments_command_validates(monkeypatch):
  c = _parse_flags(monkeypatch, "--config.rollout.group_size=4", "--config.credit.name=gigpo",
                   "--config.credit.kwargs.gamma=0.95", config="configs/ragen_sokoban.py:tiny,starpo_s")
  assert (c.rollout.strategy, c.credit.kwargs.gamma) == ("starpo_s", 0.95)
  validate(c)
