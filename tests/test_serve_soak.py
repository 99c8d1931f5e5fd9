"""bench/serve_soak.py, short: 32 clients send a mixed load (good, hostile, oversized, slow and
hanging-up requests) to `python -m poi_jax.serve` on the session's tiny workdir for 20 s, then
SIGTERM arrives with 8 requests in flight. The 10-minute soak is the documented command
(docs/reliability.md)."""
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.required  # fastapi, uvicorn, httpx: the [test] extra


def test_a_mixed_load_gets_no_5xx_and_sigterm_drops_no_request(squad_tiny_run, tmp_path):
  from tests.required_checks import import_or_skip
  for module in ("fastapi", "uvicorn", "httpx"):
    import_or_skip(module, "the [test] extra")
  out = subprocess.run([sys.executable, "bench/serve_soak.py", f"--model={squad_tiny_run}",
                        "--minutes=0.33", "--clients=32", "--in_flight=8", f"--out={tmp_path}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=900)
  report = json.loads((tmp_path / "soak_report.json").read_text())
  assert out.returncode == 0 and report["ok"], out.stdout[-3000:] + out.stderr[-3000:]
  kinds = {k.split()[0] for k in report["by_kind_and_status"]}
  assert kinds == {"good", "hostile", "oversized", "slow", "disconnect"}, kinds
  assert report["server_errors_5xx"] == [] and report["good_failed"] == []
  assert report["by_kind_and_status"]["good 200"] > 100
  assert report["drain"] == {"in_flight": 8, "outcomes": {"answered": 8}, "not_answered": [],
                             "exit_status": 0, "exit_s": report["drain"]["exit_s"]}
