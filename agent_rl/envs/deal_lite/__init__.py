"""DealLite, Deal-or-No-Deal bargaining between two roles (registers "deal_lite"); see env.py
(the env), game.py (tasks, values, Nash/Pareto solutions), scripted.py (scripted counterparts)."""
from agent_rl.envs.deal_lite.env import DealLite, DealState  # noqa: F401
from agent_rl.envs.deal_lite.game import DealTask  # noqa: F401
from agent_rl.envs.deal_lite.scripted import BARGAINERS  # noqa: F401
