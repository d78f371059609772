"""Advantage and credit-assignment kernels, one registry (shared/ALGORITHMS.md).

    from agent_rl import credit
    adv = credit.get("grpo")(batch, norm_by_std=True)
"""
from agent_rl.credit.base import CREDIT, Credit, get, names, register, token_advantages, turn_to_token
from agent_rl.credit import outcome, gae, shaping, verl_compat  # noqa: registers
from agent_rl.credit import gigpo, rewardflow, graphgpo, bepo, milestone, multiagent, stratified, process, fatal, skills  # noqa: registers
