"""The run's metric helpers, re-exported from `agent_rl.metrics` (their home since the
writer grew several sinks) so `train/` keeps importing them from here."""
from agent_rl.metrics import (MetricWriter, NonFiniteError, check_finite, progress, read_jsonl,
                              to_host)

__all__ = ["MetricWriter", "NonFiniteError", "check_finite", "progress", "read_jsonl", "to_host"]
