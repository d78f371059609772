"""Chat templates: our sandboxed rendering against transformers' apply_chat_template, the
per-turn prompt pieces, and token-in-token-out (the ids the rollout builds from the pieces are
the ids apply_chat_template gives, or differ exactly as documented: Qwen3's dropped reasoning)."""
import jinja2
import pytest
import transformers

from agent_rl.rollout.layout import PromptPieces, chat_pieces
from agent_rl.tokenizers import chat, load_hf, templates
from tests.tokenizers.hf_fixtures import PADS, hf_dir

# (family of the tokenizer, template name)
CASES = {"qwen2.5": ("qwen2", "qwen2.5"), "qwen3": ("qwen2", "qwen3"), "llama3": ("llama3", None),
         "gemma3": ("gemma", None)}
SYSTEM, INSTR = "You are a helpful agent.", "Push every box onto a goal. Answer in <answer>...</answer>."
OBS = ["#####\n#_P_#\n#_O_#\n#####", "Box at (3, 4). You are at (1,2).", "Reward 1. 日本語 🙂"]
ACT = ["<answer>Up</answer>", "<answer>Left || Down</answer>", "<answer>right</answer>"]
_TOKS = {}


def _pair(case):
  if case not in _TOKS:
    d = hf_dir(*CASES[case])
    _TOKS[case] = (load_hf(d, pad_token=PADS.get(CASES[case][0])),
                   transformers.AutoTokenizer.from_pretrained(d))
  return _TOKS[case]


def _ref_ids(ref, msgs, **kw):
  return list(ref.apply_chat_template(msgs, tokenize=True, return_dict=False, **kw))


def _conv(obs, acts, system=SYSTEM):
  return chat._conversation(system, INSTR, obs, acts)


CONVERSATIONS = [
    (_conv(OBS[:1], []), True),
    (_conv(OBS, ACT), True),
    (_conv(OBS[:2], ACT), False),
    (_conv(OBS[:2], ["  spaced  ", "<think>\nplan\n</think>\n\n<answer>Up</answer>"]), False),
    (_conv(OBS, ["<think>a</think><answer>Up</answer>", "<answer>Down</answer>"]), True),
]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("conv", range(len(CONVERSATIONS)))
def test_render_matches_transformers(case, conv):
  tok, ref = _pair(case)
  msgs, gen = CONVERSATIONS[conv]
  assert chat.render(tok, msgs, add_generation_prompt=gen) == ref.apply_chat_template(
      msgs, tokenize=False, add_generation_prompt=gen)
  if case == "qwen3":
    assert chat.render(tok, msgs, add_generation_prompt=gen, enable_thinking=False) == \
        ref.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen, enable_thinking=False)


@pytest.mark.parametrize("case", sorted(CASES))
def test_pieces_and_chat_pieces(case):
  tok, _ = _pair(case)
  p = chat.prompt_pieces(tok, INSTR, SYSTEM)
  assert p.first.endswith(INSTR + "\n") and SYSTEM in p.first
  assert tok.is_special(p.turn_end_id) and p.turn_end_id in tok.eos_ids
  pp = chat_pieces(tok, INSTR, SYSTEM)
  assert pp == PromptPieces(first=p.first_ids, turn_prefix=p.turn_prefix_ids, header=p.header_ids,
                            pad_id=tok.pad_id)
  with pytest.raises(ValueError, match="template_kwargs"):
    from agent_rl.tokenizers import ByteTokenizer
    chat_pieces(ByteTokenizer(), INSTR, enable_thinking=False)


def _episode(tok, pieces, obs, acts):
  return chat.episode_ids(pieces, [tok.encode(o) for o in obs], [tok.encode(a) for a in acts])


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("turns", [1, 2, 3])
def test_token_in_token_out(case, turns):
  # The rollout's ids (pieces + observation ids + generated ids + the turn-end stop token)
  # equal apply_chat_template's at every generation point and for the finished episode.
  tok, ref = _pair(case)
  pieces = chat.prompt_pieces(tok, INSTR, SYSTEM)
  obs, acts = OBS[:turns], ACT[:turns - 1]
  ours = _episode(tok, pieces, obs, acts)
  assert ours == _ref_ids(ref, _conv(obs, acts), add_generation_prompt=True)
  # Finished: the episode ends on the policy's turn-end token; the template may add "\n".
  # Qwen3 writes a think block into the last answered turn (empty when the policy wrote none).
  last = "<think>\n\n</think>\n\n" if case == "qwen3" else ""
  done = _episode(tok, pieces, obs, ACT[:turns - 1] + [last + ACT[turns - 1]])
  full = _ref_ids(ref, _conv(obs, ACT[:turns]))
  assert full[:len(done)] == done and tok.decode(full[len(done):]) in ("", "\n")


def test_qwen3_keeps_reasoning_the_template_drops():
  # Qwen3's template drops the <think> block of assistant turns before the last user query.
  # The rollout keeps it: the learner scores exactly the ids the policy conditioned on and
  # sampled (token-in-token-out); dropping it would re-tokenize history between turns.
  tok, ref = _pair("qwen3")
  pieces = chat.prompt_pieces(tok, INSTR, SYSTEM)
  thought = ["<think>\nthe box is left\n</think>\n\n<answer>Left</answer>",
             "<think>\nnow down\n</think>\n\n<answer>Down</answer>"]
  ours = _episode(tok, pieces, OBS, thought)
  hf = _ref_ids(ref, _conv(OBS, thought), add_generation_prompt=True)
  assert ours != hf
  stripped = [t.split("</think>")[-1].lstrip("\n") for t in thought]
  assert _episode(tok, pieces, OBS, stripped) == hf           # exactly the dropped blocks differ
  assert tok.decode(ours).count("<think>") == 2 and tok.decode(hf).count("<think>") == 0
  # The last answered turn (after the last user message) keeps its reasoning in both.
  assert _episode(tok, pieces, OBS[:1], thought[:1]) == _ref_ids(ref, _conv(OBS[:1], thought[:1]))[:-1]


def test_qwen3_non_thinking_generation_prompt():
  # enable_thinking=False puts an empty think block in the generation prompt but not in
  # history; the rollout keeps the prompt the model answered after.
  tok, ref = _pair("qwen3")
  p = chat.prompt_pieces(tok, INSTR, SYSTEM, enable_thinking=False)
  assert p.header == p.history_header + "<think>\n\n</think>\n\n"
  obs, acts = OBS, ACT[:2]
  enc = [tok.encode(o) for o in obs], [tok.encode(a) for a in acts]
  hf = _ref_ids(ref, _conv(obs, acts), add_generation_prompt=True, enable_thinking=False)
  assert chat.episode_ids(p, *enc, history_header=True) == hf
  ours = chat.episode_ids(p, *enc)
  assert tok.decode(ours).count("<think>\n\n</think>") == 3 and tok.decode(hf).count("<think>") == 1


def test_template_errors_name_file_and_key():
  tok, _ = _pair("qwen2.5")
  bad = dict(syntax="{% for m in messages %}{{ m.content }",
             raises="{{ raise_exception('System role not supported') }}",
             sandbox="{{ ''.__class__.__mro__[1].__subclasses__() }}",
             twice="{% for m in messages %}{{ m.content }}{{ m.content }}{% endfor %}",
             no_stop="{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}\n{% endfor %}"
                     "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
  want = dict(syntax="not a valid Jinja", raises="System role not supported", sandbox="failed to render",
              twice="exactly once", no_stop="special token")
  for name, src in bad.items():
    tok.chat_template = src
    try:
      with pytest.raises(ValueError, match=want[name]) as e:
        chat.prompt_pieces(tok, INSTR, SYSTEM)
      assert "tokenizer_config.json: key 'chat_template'" in str(e.value), name
    finally:
      tok.chat_template = templates.QWEN2_5
  tok.chat_template = None
  try:
    with pytest.raises(ValueError, match="no chat template"):
      chat.render(tok, [])
  finally:
    tok.chat_template = templates.QWEN2_5
  assert isinstance(chat.compile_template("{{ 1 }}").environment, jinja2.sandbox.ImmutableSandboxedEnvironment)
