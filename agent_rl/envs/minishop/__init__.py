"""MiniShop, a WebShop-like text shopping env (registers "minishop"); see env.py."""
from agent_rl.envs.minishop.env import MiniShop, MiniShopState, MiniShopTask  # noqa: F401
