"""KB-SearchQA (issue 19 §2): Search-R1-style multi-hop QA over a generated knowledge graph."""
from agent_rl.envs.kb_search_qa.env import KBSearchQA, KBState, KBTask  # noqa: F401 (registers)
