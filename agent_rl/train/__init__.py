"""agent_rl.train."""
