"""A stand-in for ``poi_jax.main`` in the ablation runner's fast test (no JAX): it writes an
intermediate ``eval_results.json`` (step 1), then the final one (step 2) with scores computed from
the seed and the overrides, and appends its argv to ``<workdir>/calls.txt``. With
``STUB_FAIL=<substring>`` it exits 3 after the intermediate evaluation when an argument contains
that substring (an interrupted or failed run). With ``STUB_ENVIRONMENT=<json>`` it writes that as the
run's ``environment.json``. With ``STUB_SLEEP=<seconds>`` it sleeps that long before the final
evaluation (a run long enough to be stopped)."""
import json
import os
import sys
import time


def main(argv):
  args = dict(a[2:].split("=", 1) for a in argv if a.startswith("--") and "=" in a)
  workdir = args["workdir"]
  os.makedirs(workdir, exist_ok=True)
  with open(os.path.join(workdir, "calls.txt"), "a") as f:
    f.write(" ".join(argv) + "\n")
  seed = int(args["config.seed"])
  lr = float(args.get("config.optim.lr", 1.0))
  head = args.get("config.model.head", "poi")
  score = 50.0 + 10.0 * lr + {"poi": 1.0, "none": 0.0}.get(head, 2.0) + seed

  def write(step, value):
    with open(os.path.join(workdir, "eval_results.json"), "w") as f:
      json.dump({"accuracy": value, "f1": value / 2, "step": step}, f)

  if os.environ.get("STUB_ENVIRONMENT"):  # what the engine records (poi_jax.train.environment)
    with open(os.path.join(workdir, "environment.json"), "w") as f:
      f.write(os.environ["STUB_ENVIRONMENT"])
  write(1, -1.0)
  fail = os.environ.get("STUB_FAIL")
  if fail and any(fail in a for a in argv):
    return 3
  time.sleep(float(os.environ.get("STUB_SLEEP", "0")))
  write(2, score)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
