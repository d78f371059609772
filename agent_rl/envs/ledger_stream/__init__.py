"""LedgerStream, UMA's Ledger-QA memory-agent world (registers "ledger_stream"); see env.py."""
from agent_rl.envs.ledger_stream.env import LedgerState, LedgerStream, LedgerTask  # noqa: F401
