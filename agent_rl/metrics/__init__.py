"""What a run writes for people to read: metric sinks behind one writer (JSONL, TensorBoard,
Weights & Biases), selected by `config.log`.

    writer = MetricWriter.from_config(config, workdir)   # workdir may be gs://...
    writer.truncate_after(restored_step)                  # exact resume
    writer.write(step, {"rollout/success": 0.5})
    writer.write_episodes(step, "after", render_episodes(batch, tokenizer))
"""
from agent_rl.metrics.sinks import (EPISODES_FILE, METRICS_FILE, SINKS, JsonlSink, Sink,
                                    TensorBoardSink, WandbSink, read_jsonl)
from agent_rl.metrics.writer import (DEFAULT_SINKS, MetricWriter, NonFiniteError,
                                     check_finite, check_log_config, parse_sinks, progress,
                                     to_host)

__all__ = ["EPISODES_FILE", "METRICS_FILE", "SINKS", "JsonlSink", "Sink", "TensorBoardSink",
           "WandbSink", "read_jsonl", "DEFAULT_SINKS", "MetricWriter", "NonFiniteError",
           "check_finite", "check_log_config", "parse_sinks", "progress", "to_host"]
