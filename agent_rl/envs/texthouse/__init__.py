"""TextHouse ("texthouse") and TextLab ("textlab"): ALFWorld-like household text environments.

catalog.py (kinds, families, grammar), world.py (tasks, states, generator), dynamics.py
(rules, goal tracking), text.py (ALFWorld feedback from pieces), parse.py (action automaton),
solver.py (expert plans, host task constructor), env.py (the env; registers both names).
"""
from agent_rl.envs.texthouse.env import REWARD_NAMES, TextHouse, textlab  # noqa: F401  (registers)
