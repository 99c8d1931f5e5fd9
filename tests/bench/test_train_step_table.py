"""`bench/train_step.py`'s table: every time is the median of the timed steps (a slow outlier
moves neither the row nor its ratios), the spread is printed beside it, and JAX's host dispatch
time is its own column."""
from types import SimpleNamespace

from bench import train_step


def test_rows_report_the_median_step_its_spread_and_the_host_time(capsys):
  rows = [("torch eager f32", [0.3, 0.1, 0.2], None, 1.0, "float32", None),
          # one 10 s outlier among three 0.1 s steps: a mean would make JAX 3.3x slower
          ("jax jit f32", [0.1, 10.0, 0.1, 0.1], 0.5, 2.0, "float32", [0.01, 0.02, 0.03, 0.5])]
  train_step.print_table(rows, SimpleNamespace(batch=8), flops=1.0, peak=None)
  lines = capsys.readouterr().out.splitlines()
  assert lines[0].split()[:5] == ["step", "ms/step", "min-max", "host", "ms"]
  jax_row = lines[-1].split()
  assert jax_row[3:7] == ["100.0", "100.0-10000.0", "25.0", "80.00"]  # ms, spread, host, ex/s
  assert jax_row[-2:] == ["2.00", "2.00"]  # eager's median 200 ms over JAX's 100 ms
  torch_row = lines[-2].split()
  assert torch_row[3:6] == ["200.0", "100.0-300.0", "n/a"]


def test_timed_returns_each_step_and_what_it_returned():
  calls = iter([0.5, 0.25])
  times, results = train_step.timed(lambda: next(calls), 2)
  assert results == [0.5, 0.25] and len(times) == 2 and all(t >= 0 for t in times)
