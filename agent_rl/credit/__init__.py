"""Advantage and credit-assignment kernels, one registry (shared/ALGORITHMS.md).

    from agent_rl import credit
    adv = credit.get("grpo")(batch, norm_by_std=True)
    credit.check_inputs("uma", {}, env=env, env_name="sokoban", critic=False)  # at start-up
"""
from agent_rl.credit.base import CREDIT, Credit, get, names, needs_of, register, token_advantages, turn_to_token
from agent_rl.credit.needs import Needs
from agent_rl.credit import outcome, gae, shaping, verl_compat  # noqa: registers
from agent_rl.credit import gigpo, rewardflow, graphgpo, bepo, milestone, multiagent, stratified, process, fatal, skills  # noqa: registers
from agent_rl.credit import carl, iterpo  # noqa: registers
from agent_rl.credit import baseline, needs  # noqa: F401
from agent_rl.credit.check import check_inputs
