"""The training loop dispatches at most ``train.steps_in_flight`` steps (`loop.STEPS_IN_FLIGHT`,
2, by default) ahead of the computation: JAX dispatches asynchronously, and without the bound the
loop ran up to ``train.log_every`` steps ahead (the progress bar and the watchdog counting steps not yet computed, and a SIGTERM's
checkpoint waiting for all of them)."""
import pytest

from tests.conftest import SQUAD


@pytest.mark.parametrize("steps_in_flight", [None, 1])  # None: the default
def test_the_loop_waits_for_the_step_in_flight_steps_back(tmp_path, monkeypatch,
                                                           steps_in_flight):
  from configs import squad2 as squad_config
  from poi_jax.train import loop
  events = []
  real_global_batch, real_wait_for = loop.placement.global_batch, loop._wait_for

  def global_batch(*args, **kwargs):  # called once a step, just before its dispatch
    events.append("dispatch")
    return real_global_batch(*args, **kwargs)

  def wait_for(out):
    events.append("wait")
    real_wait_for(out)

  monkeypatch.setattr(loop.placement, "global_batch", global_batch)
  monkeypatch.setattr(loop, "_wait_for", wait_for)
  config = squad_config.get_config("tiny")
  steps = 7
  with config.unlocked():
    config.data.train_file = config.data.eval_file = str(SQUAD)
    config.data.max_train_examples, config.data.max_eval_examples = 16, 8
    config.train.max_steps, config.train.eval_every = steps, 100
    config.train.save_every, config.train.log_every = 100, 100  # nothing else reads a result
    config.train.export_best = False
    if steps_in_flight is not None:
      config.train.steps_in_flight = steps_in_flight
  loop.train_and_evaluate(config, str(tmp_path / "work"), "train")
  k = steps_in_flight or loop.STEPS_IN_FLIGHT
  assert config.train.steps_in_flight == k and loop.STEPS_IN_FLIGHT == 2
  # Each step from the (k+1)-th on waits, right after its dispatch, for the one k steps back.
  assert events == ["dispatch"] * (k + 1) + ["wait", "dispatch"] * (steps - k - 1) + ["wait"], \
      events
