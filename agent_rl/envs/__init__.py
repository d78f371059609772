"""Pure-JAX text environments and their registry: `agent_rl.envs.make(name, **kwargs)`."""
from agent_rl.envs.base import ENVS, Text, fingerprint, make
from agent_rl.envs import frozenlake, sokoban  # noqa: F401  (register "frozenlake", "sokoban")
from agent_rl.envs import bandit, countdown  # noqa: registers
from agent_rl.envs import texthouse  # noqa: F401  (registers "texthouse", "textlab")
from agent_rl.envs import minishop  # noqa: F401  (registers "minishop")
from agent_rl.envs import kb_search_qa  # noqa: F401  (registers "kb_search_qa")
from agent_rl.envs import calc_math  # noqa: F401  (registers "calc_math")
from agent_rl.envs import ledger_stream  # noqa: F401  (registers "ledger_stream")
from agent_rl.envs import roles  # noqa: F401  (registers "roles": any env, K scheduled agents)
from agent_rl.envs import deal_lite  # noqa: F401  (registers "deal_lite")
from agent_rl.envs import route  # noqa: F401  (registers "route": a router over worker agents)
