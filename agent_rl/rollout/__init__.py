"""agent_rl.rollout: jitted sampler, multi-turn episode loop (compiled and host bridge),
rollout strategies. See episode.py for the loop, layout.py for the token layout."""
from agent_rl.rollout.batch import EpisodeBatch, from_turns
from agent_rl.rollout.bridge import HostRollout, JaxHostEnv, host_rollout
from agent_rl.rollout.compiled import make_rollout, rollout
from agent_rl.rollout.episode import EpisodeConfig, SearchConfig
from agent_rl.rollout.gate import GateConfig
from agent_rl.rollout.layout import PromptPieces, chat_pieces
from agent_rl.rollout.policy import Policy
from agent_rl.rollout.sampler import SamplerConfig, generate, sample, sampling_logprobs
from agent_rl.rollout.strategies import STRATEGIES
