"""Paper reproductions: each configs/<paper>.py declares its row (`Comparison`: method vs
baselines as variants of the config, the paper's metrics and numbers); the harness runs arms x
seeds resumably (`runs`), reduces them to intervals over seeds (`stats`: t and Welch) and
writes the row's JSON, markdown and plot and the table of all rows (`results`).
CLI: launch/reproduce.py. Importing this package is light (no JAX): configs import it.
"""
from agent_rl.eval.reproduce.comparison import Comparison

__all__ = ["Comparison"]
