"""CalcMath, arithmetic word problems with an exact calculator tool (registers "calc_math");
see env.py (the env), problem.py (the generator), calc.py (the calculator and its faults)."""
from agent_rl.envs.calc_math.env import CalcMath, CalcMathState  # noqa: F401
from agent_rl.envs.calc_math.problem import CalcTask  # noqa: F401
from agent_rl.envs.calc_math.roles import CalcMathVerify, CalcVerifyState  # noqa: F401  (registers "calc_math_verify")
