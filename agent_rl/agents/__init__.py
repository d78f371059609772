"""Several agents in one episode (issue 21): parameter modes, row routing, per-agent rewards.

params.py  the shared / lora / separate layouts (stacked leaves on an agent axis)
routing.py the rollout policy and the learner's forward, each row under its agent's weights
rewards.py per-role rewards -> `agent_return`, per-agent rollout metrics
config.py  `config.agents`, start-up checks, checkpoint agent checks
"""
from agent_rl.agents.config import Agents, check_checkpoint, resolve, validate_agents
from agent_rl.agents.params import MODES, per_agent_norms, select_agent, stacked_factory
from agent_rl.agents.rewards import agent_metrics, attach_agent_return, role_terms
from agent_rl.agents.routing import make_apply, rollout_policy
