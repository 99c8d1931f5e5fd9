"""The training loop hands freed memory back (``runtime.cpu_malloc=reuse``) where garbage was
just made: after the first step (the compilers' working memory) and around every evaluation
(the training step's kept pages before it, the evaluation programs' after it). Without these
calls the CPU quickstart under ``reuse`` peaked at 6.3 GB; with them 3.2 GB while training
(docs/performance.md)."""
from tests.conftest import SQUAD


def test_the_loop_hands_memory_back_after_the_first_step_and_around_evaluations(
    tmp_path, monkeypatch):
  from configs import squad2 as squad_config
  from poi_jax.train import loop
  events = []
  real_evaluate = loop.eval_lib.evaluate

  def evaluate(run, *, step, **kwargs):
    events.append(f"eval@{step}")
    return real_evaluate(run, step=step, **kwargs)

  monkeypatch.setattr(loop.runtime, "release_freed_memory", lambda: events.append("release"))
  monkeypatch.setattr(loop.eval_lib, "evaluate", evaluate)
  config = squad_config.get_config("tiny")
  with config.unlocked():
    config.data.train_file = config.data.eval_file = str(SQUAD)
    config.data.max_train_examples, config.data.max_eval_examples = 16, 8
    config.train.max_steps, config.train.eval_every = 4, 2
    config.train.save_every, config.train.log_every = 100, 2
    config.train.export_best = False
  loop.train_and_evaluate(config, str(tmp_path / "work"))
  # step 1; the evaluation at step 2; the final one at step 4 (after the loop)
  assert events == ["release", "release", "eval@2", "release", "release", "eval@4", "release"], \
      events
