"""`python -m agent_rl.train --config=configs/<experiment>.py[:arg] --workdir=DIR [--config.x=y]`.

`--config.credit.kwargs.gamma=0.95` sets a registered function's keyword (agent_rl.train.cli).
"""
# Multi-host: join the job the launcher started before anything can touch a device (importing
# some rooms builds constant tables on the default device). No-op for a single process.
from agent_rl.parallel.distributed import initialize_from_env

initialize_from_env()

from absl import app, flags, logging  # noqa: E402

from agent_rl.train.cli import define_config_flag  # noqa: E402
from agent_rl.train.run import run  # noqa: E402

_CONFIG = define_config_flag("config", "experiment config file (agent_rl.train.cli)")
_WORKDIR = flags.DEFINE_string("workdir", None, "where checkpoints, logs and reports go")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
  run(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  app.run(main)
