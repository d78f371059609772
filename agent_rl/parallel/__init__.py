"""agent_rl.parallel: the (data, fsdp, tensor) mesh, logical-axis rules, sharding constraints
and params born sharded (see shared/DESIGN.md, "Parallel")."""
from agent_rl.parallel.mesh import AXES, make_mesh, resolve_shape
from agent_rl.parallel.params import (init_sharded, optimizer_shardings, state_shardings,
                                      variable_names)
from agent_rl.parallel.placement import Placement, axis_parts, make_placement
from agent_rl.parallel.rules import (DEFAULT_RULES, constrain, current_rules, logical_sharding,
                                     logical_to_spec, mesh_rules)

__all__ = ["AXES", "make_mesh", "resolve_shape", "DEFAULT_RULES", "logical_to_spec",
           "logical_sharding", "constrain", "current_rules", "mesh_rules", "init_sharded",
           "state_shardings", "variable_names", "optimizer_shardings", "Placement", "axis_parts",
           "make_placement"]
