"""The `--config=configs/<experiment>.py[:variants]` flag with `--config.x.y=value` overrides.

Fields of `base_config()` keep their type (`--config.optim.lr=fast` fails at parse time). The
keyword arguments of registered functions have no fields to type them (`credit.kwargs` is
empty until a config sets something), so the flag accepts new keys and parses them as Python
literals (ml_collections' `accept_new_attributes`):

    --config.credit.name=gigpo --config.credit.kwargs.gamma=0.95     # float 0.95
    --config.env.kwargs.dim_room='(5, 5)'  --config.x.kwargs.ids='[1, 2]'
    --config.credit.kwargs.reset_at_mask=false   (or --noconfig.credit.kwargs.reset_at_mask)
    --config.credit.kwargs.norm=std_norm                              # not a literal: a string

A new key anywhere but inside a `kwargs` / `*_kwargs` dict (a typo: `--config.train.iteratons`)
is rejected at start-up by `config.validate` (`check_fields`), naming it and listing the block's
fields, before anything compiles; `validate` also checks each kwarg against its function's
signature. (An absl flag validator could reject it at parse time, but absl prefixes its message
with the whole config dump.) `--config.credit.kwargs='{}'` (before any `--config.credit.kwargs.x`)
drops the kwargs the config file set.
"""
from __future__ import annotations

from absl import flags
from ml_collections import config_flags


def define_config_flag(name: str = "config", help_string: str = "experiment config file",
                       flag_values: flags.FlagValues = flags.FLAGS) -> flags.FlagHolder:
  """Defines `--<name>=file.py[:arg]` (module docstring); returns its FlagHolder."""
  return config_flags.DEFINE_config_file(name, None, help_string, flag_values=flag_values,
                                         lock_config=False, accept_new_attributes=True)
