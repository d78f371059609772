"""benchmarks/textworld_peer.py: a small TextWorld game is generated offline with the settings
asked for, cached, stepped through random admissible commands, and replayed identically by
the plain env; the timings are consistent; bad arguments name themselves."""
import pytest

pytest.importorskip("textworld")

from benchmarks.textworld_peer import make_game, textworld_steps_per_s  # noqa: E402


def test_small_game_is_made_cached_stepped_and_replayed(tmp_path):
  kw = dict(world_size=2, nb_objects=4, quest_length=2, cache_dir=str(tmp_path))
  res = textworld_steps_per_s(30, 3, max_episode_steps=8, **kw)
  assert (res["rooms"], res["objects"], res["walkthrough_len"]) == (2, 4, 2)
  assert res["n_steps"] == 30 and res["episodes"] >= 30 // 8  # resets after 8 steps at most
  assert res["replay_matches"]  # the plain env saw the same game as the admissible one
  assert res["mean_admissible_commands"] >= 1 and res["generate_s"] > 0
  for mode in ("step", "step_admissible"):
    assert res[f"{mode}_ns_per_step"] > 0
    assert res[f"{mode}_steps_per_s"] == pytest.approx(1e9 / res[f"{mode}_ns_per_step"])
  assert res["admissible_overhead_ns_per_step"] == pytest.approx(
      res["step_admissible_ns_per_step"] - res["step_ns_per_step"])
  path, seconds = make_game(3, **kw)  # reused, not regenerated
  assert (path, seconds) == (res["game"], 0.0)


@pytest.mark.parametrize("kw,field", [(dict(n_steps=0, seed=1), "n_steps"),
                                      (dict(n_steps=5, seed=-1), "seed"),
                                      (dict(n_steps=5.0, seed=1), "n_steps"),
                                      (dict(n_steps=5, seed=1, max_episode_steps=0),
                                       "max_episode_steps")])
def test_bad_arguments_name_the_field(kw, field):
  with pytest.raises(ValueError, match=field):
    textworld_steps_per_s(**kw)
