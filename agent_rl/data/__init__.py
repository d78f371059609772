"""agent_rl.data."""
