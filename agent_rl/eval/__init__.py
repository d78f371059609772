"""agent_rl.eval."""
