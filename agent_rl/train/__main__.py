"""`python -m agent_rl.train --config=configs/<experiment>.py[:arg] --workdir=DIR [--config.x=y]`."""
from absl import app, flags, logging
from ml_collections import config_flags

from agent_rl.train.run import run

_CONFIG = config_flags.DEFINE_config_file("config", None, "experiment config file", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "where checkpoints, logs and reports go")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  del argv
  logging.set_verbosity(logging.WARNING)  # orbax logs every save at INFO
  run(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  app.run(main)
