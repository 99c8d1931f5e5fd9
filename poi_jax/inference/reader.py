"""A trained model answering your own text: ``Reader.load(path).answer(question, context)``.

``path`` is a run's workdir (its best checkpoint, else the latest) or its ``export/`` directory
(self-sufficient: see `poi_jax.model_files.export`). Text goes through the task's own pipeline,
exactly as in training and evaluation: the Task's ``featurize`` (long passages windowed with
``data.doc_stride``, POS tags from NLTK on the fly; no feature cache, no worker processes), the
model in inference mode, and for extractive tasks the engine's decoder
(`poi_jax.eval.spans.decode_squad`), so the answers equal the engine's ``predictions.json``.

SQuAD 2.0 "no answer": a question is unanswerable when ``null score - best span score`` exceeds
δ = `Reader.null_threshold`: the threshold tuned on the eval set at the loaded checkpoint
(``tuned_null_threshold``, kept with the checkpoint's scores and in ``export/reader.json``), else
the config's ``eval.null_score_diff_threshold``; ``Reader.load(..., null_threshold=x)`` overrides.

The model call is jitted once per batch shape: each batch is padded to a power of two up to
``batch_size`` rows and, with length buckets (``data.length_buckets``, `poi_jax.data.buckets`),
its windows ordered by length and cut to the smallest bucket that holds the longest (at most
(log2(batch_size) + 1) x buckets compilations per option count; `Reader.compiled_shapes` counts
them, so a server can check that no request compiled). The outputs go back in the windows'
order, and are the same with or without buckets.

Extractive answers run in three stages that a server can pipeline (`poi_jax.serve.batching`):
`Reader.featurize` (host: tokenizer, POS tags, windows), `Reader.predict` (the jitted model) and
`Reader.decode` (host: spans); `answer_records` is the three in a row. Passages are analysed
once (`poi_jax.data.features.passages.PassageCache`, ``passage_cache`` most recent passages:
their NLTK tags and per-character lookups), since reading apps ask several questions about one
passage; the features, and so the answers, are the same with or without it.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import os

import jax
import numpy as np
from flax import nnx

from poi_jax import jax_internals, runtime, tasks
from poi_jax.data import buckets
from poi_jax.data.records import ChoiceExample, SquadExample
from poi_jax.eval import spans
from poi_jax.inference import load as load_lib
from poi_jax.model_files import export as export_files
from poi_jax.models.build import load_tokenizer

# Passages whose analysis a Reader keeps: a SQuAD-sized passage's is ~10 KB (3 small arrays per
# character + its tags), so 256 cost a few MB.
DEFAULT_PASSAGE_CACHE = 256


@dataclasses.dataclass
class Answer:
  """An extractive answer. ``start``/``end``: character offsets in the context (``end``
  exclusive; None when ``no_answer``); ``score``: start + end logit of the span (of the null
  answer when ``no_answer``); ``probability``: softmax over the n-best candidates;
  ``null_score_diff``: null score - best span score (SQuAD 2.0 models; None otherwise).

  ``no_candidate``: no span passed the decoder's rules (inside the context, start <= end, at most
  ``eval.max_answer_length`` tokens) in any window, so the answer is "no answer" whatever δ is;
  then ``null_score_diff`` and ``probability`` are None (there is nothing to compare the null
  score with), not a sentinel. ``nbest``: the candidates (``text``, ``start``, ``end``,
  ``score``, ``probability``; the null answer with text ""), best first. ``tokens`` (only with
  ``explain=True``): the context's sub-tokens, each ``{"start", "end", "text", "score", "pos"}``:
  character offsets, the final co-attention score (0-1; None for a model without co-attention)
  and the POS tag the model saw (None for a model without POS embedding)."""
  text: str
  start: int | None
  end: int | None
  score: float | None
  probability: float | None
  no_answer: bool
  null_score_diff: float | None
  no_candidate: bool = False
  nbest: list[dict] = dataclasses.field(default_factory=list)
  tokens: list[dict] | None = None

  def to_dict(self, *, nbest: bool = False) -> dict:
    """The predict CLI's fields (+ ``nbest`` when asked, + ``tokens`` when explained)."""
    d = dataclasses.asdict(self)
    if not nbest:
      del d["nbest"]
    if d["tokens"] is None:
      del d["tokens"]
    return d


@dataclasses.dataclass
class Choice:
  """A multiple-choice answer: ``probabilities`` (softmax over the options' ``logits``), the best
  option's ``index`` and text ``option``."""
  index: int
  option: str
  probabilities: list[float]
  logits: list[float]

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)


def _softmax(x: np.ndarray) -> np.ndarray:
  e = np.exp(x - x.max())
  return e / e.sum()


def _as_list(value, name: str) -> tuple[list, bool]:
  """``(items, single)``: a str (or one option list) is one item; a list/tuple is a batch."""
  if isinstance(value, str):
    return [value], True
  if isinstance(value, (list, tuple)):
    return list(value), False
  raise TypeError(f"{name} must be a string or a list of strings, got {type(value).__name__}")


def text_problem(value, *, allow_empty: bool = False) -> str | None:
  """What makes ``value`` unusable as a question, passage or option, or None: not a string,
  empty or blank (unless ``allow_empty``), or not encodable as UTF-8. A lone surrogate such as
  ``"\\ud800"`` is a valid JSON escape and a valid Python string, but no character: the fast
  tokenizer refuses it with a bare TypeError. The one rule of the Reader, the predict CLI and the
  server (`poi_jax.inference.requests`), so each names the field instead of failing later."""
  if not isinstance(value, str) or (not allow_empty and not value.strip()):
    # Scalars (and the server's unconverted numbers) shown clipped; containers by type only, as
    # a megabyte or a deep nesting can sit where the text belongs.
    plain = isinstance(value, (str, int, float, type(None))) or hasattr(value, "literal")
    shown = repr(value) if plain else type(value).__name__
    shown = shown if len(shown) <= 60 else f"{shown[:50]}... ({len(shown):,} characters)"
    return f"must be a {'' if allow_empty else 'non-empty '}string, got {shown}"
  try:
    value.encode("utf-8")
  except UnicodeEncodeError as e:
    return (f"holds a lone surrogate (U+{ord(value[e.start]):04X} at character {e.start}): "
            f"not a character, not encodable as UTF-8")
  return None


def _check_text(value, field: str, i: int) -> None:
  problem = text_problem(value)
  if problem:
    raise ValueError(f"item {i}: field {field!r} {problem}")


class Reader:
  """A trained extractive (SQuAD) or multiple-choice (RACE, DREAM) model. Build with `load`.

  Attributes: ``config`` (the run's config), ``task``, ``model``, ``step`` (the checkpoint),
  ``null_threshold`` (δ, SQuAD 2.0), ``batch_size`` (rows per model call).
  """

  def __init__(self, config, task, model, *, tokenizer, step, null_threshold: float,
               batch_size: int, passage_cache: int = DEFAULT_PASSAGE_CACHE):
    from poi_jax.data.features.passages import PassageCache
    self.config, self.task, self.model, self.tokenizer = config, task, model, tokenizer
    self.step, self.null_threshold, self.batch_size = step, float(null_threshold), batch_size
    self.passages = PassageCache(passage_cache)
    graphdef, self._state = nnx.split(model)
    # Pure function of (state, batch): one compilation per batch shape, the state not baked in;
    # on a CPU without XLA's YNNPACK fusions, as the engine's predict step (poi_jax/runtime.py).
    options = runtime.forward_compiler_options()
    self._forward = jax.jit(lambda state, batch: nnx.merge(graphdef, state)(
        batch, deterministic=True), compiler_options=options)
    # explain=True: the same call, also returning the co-attention's per-token scores (a
    # separate function, so that plain answers keep the engine's exact computation).
    self._forward_scores = jax.jit(lambda state, batch: nnx.merge(graphdef, state)(
        batch, deterministic=True, with_scores=True), compiler_options=options)

  @classmethod
  def load(cls, path: str, *, step: int | None = None, null_threshold: float | None = None,
           batch_size: int | None = None, length_buckets: str | None = None,
           passage_cache: int = DEFAULT_PASSAGE_CACHE, cpu_malloc: str = "system") -> Reader:
    """The model of a workdir (checkpoint ``step``; default: the best, else the latest) or of an
    ``export/`` directory (its one model; ``step`` is ignored). ``null_threshold``: overrides δ;
    ``batch_size``: default the config's ``train.eval_batch_size``; ``length_buckets``: overrides
    the run's ``data.length_buckets`` (``off``, ``auto`` or lengths such as ``"128,256"``: the
    answers are the same, only the compiled shapes and speed change); ``passage_cache``: passages
    whose analysis is kept (0: none; module docstring); ``cpu_malloc``: `poi_jax.runtime`'s
    setting for this process, if nothing set it before (``system``: memory stays flat; the
    server's ``reuse`` keeps the pages of large batches' temporaries)."""
    path = os.fspath(path)
    # The compilation cache (a second Reader of the same model compiles nothing), before the
    # model is built (poi_jax/runtime.py; the run's own cache setting where it has one). glibc's
    # malloc keeps its defaults unless asked: a long-lived reader's memory stays flat.
    runtime.configure({**(load_lib.saved_runtime(path) or {}), "cpu_malloc": cpu_malloc})
    if batch_size is not None and batch_size <= 0:
      raise ValueError(f"batch_size={batch_size} must be positive")
    config, task, model, step, delta = load_lib.load_model(path, step)
    if length_buckets is not None:
      from poi_jax.data import buckets as buckets_lib
      try:
        buckets_lib.resolve(length_buckets, config.data.max_seq_length)
      except ValueError as e:
        raise ValueError(f"length_buckets: {e}") from None
      with config.unlocked():
        config.data.length_buckets = str(length_buckets)
    if config.model.pos_embedding:
      from poi_jax.data import pos
      pos.ensure_nltk_resources()
    tokenizer = load_tokenizer(config) if task.tokenizer_needed(config) else None
    return cls(config, task, model, tokenizer=tokenizer, step=step,
               null_threshold=delta if null_threshold is None else null_threshold,
               batch_size=int(batch_size or config.train.eval_batch_size),
               passage_cache=passage_cache)

  @property
  def is_extractive(self) -> bool:
    return self.task.answers == "span"

  @property
  def has_token_scores(self) -> bool:
    """Whether ``explain=True`` gives co-attention scores (a POI-Net extractive model with
    co-attention); otherwise the explained tokens carry POS tags only."""
    return (self.is_extractive and self.config.model.head == "poi"
            and getattr(self.model, "coattention", "none") != "none")

  @property
  def compiled_shapes(self) -> int:
    """Batch shapes compiled so far (both model functions): unchanged by a request that
    compiled nothing."""
    counts = [jax_internals.compiled_shape_count(f) for f in (self._forward,
                                                              self._forward_scores)]
    return sum(c or 0 for c in counts)

  def _predict(self, features, *, with_scores: bool = False) -> dict[str, np.ndarray]:
    """The model's outputs over all features, in batches padded to a power of two rows and, with
    length buckets, ordered by length and cut to their bucket (outputs back in order)."""
    forward = self._forward_scores if with_scores else self._forward
    arrays = self.task.model_arrays(features.arrays)
    n = len(next(iter(arrays.values())))
    full = int(self.config.data.max_seq_length)
    plan = self._plan(arrays, n)
    outs, order = [], []
    for idx, length in plan:
      size = min(self.batch_size, 1 << (len(idx) - 1).bit_length())
      mask = np.zeros(size, np.float32)
      mask[:len(idx)] = 1.0
      rows = np.concatenate([idx, np.full(size - len(idx), idx[0])])
      batch = {k: v[rows] for k, v in arrays.items()}
      if length < full:
        batch = buckets.trim(batch, length, self.task.length_keys)
      batch["example_mask"] = mask
      out = jax.device_get(forward(self._state, batch))
      outs.append(buckets.pad_outputs({k: np.asarray(v)[:len(idx)] for k, v in out.items()},
                                      full, self.task.length_outputs))
      order.append(idx)
    joined = {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}
    position = np.concatenate(order)
    if np.array_equal(position, np.arange(n)):
      return joined
    back = np.empty(n, np.int64)
    back[position] = np.arange(n)
    return {k: v[back] for k, v in joined.items()}

  def _plan(self, arrays, n: int):
    """``(window indices, length)`` of each model call: in order at ``max_seq_length`` without
    buckets; ordered by length and cut to buckets with them (`poi_jax.data.buckets`)."""
    bk = self.buckets
    if not buckets.enabled(bk):
      return [(np.arange(s, min(s + self.batch_size, n)), bk[-1])
              for s in range(0, n, self.batch_size)]
    return list(buckets.sorted_batches(buckets.window_lengths(arrays), self.batch_size, bk))

  @property
  def buckets(self) -> tuple[int, ...]:
    """The length buckets the model is called with (``data.length_buckets``)."""
    return self.task.buckets(self.config)

  def compile_shapes(self, rows: list[int], *, explain_rows: tuple[int, ...] = ()) -> int:
    """Compiles the model for every length bucket and each batch size in ``rows`` (and the
    explained call for ``explain_rows``), from one warm-up window, so that no later call
    compiles (a server's start-up). Returns `compiled_shapes`."""
    if self.is_extractive:
      records = [SquadExample("0", "What is this?", "This is a warm-up passage.", [], False, [],
                              "", "<warmup>")]
      features = self.featurize(records)
    else:
      features = self.task.featurize([ChoiceExample("0", "A warm-up passage.", "What is it?",
                                                    ["yes", "no"], 0, "<warmup>")],
                                     self.tokenizer, self.config, is_training=False)
    arrays = self.task.model_arrays(features.arrays)
    one = {k: v[:1] for k, v in arrays.items()}
    calls = [(self._forward, r) for r in rows]
    if self.has_token_scores:
      calls += [(self._forward_scores, r) for r in explain_rows]

    def compile_one(call):
      (forward, r), length = call
      batch = {k: np.repeat(v, r, axis=0) for k, v in one.items()}
      batch = buckets.trim(batch, length, self.task.length_keys)
      batch["example_mask"] = np.ones(r, np.float32)
      jax.block_until_ready(forward(self._state, batch))

    # One thread per core: XLA compiles outside the GIL, so the shapes (buckets x batch sizes:
    # 40 at 384 tokens) compile side by side (2 cores: 1.3x faster; more on a GPU's host).
    shapes = [(c, length) for c in calls for length in self.buckets]
    with concurrent.futures.ThreadPoolExecutor(max(1, min(len(shapes), os.cpu_count() or 1)),
                                               thread_name_prefix="compile") as pool:
      list(pool.map(compile_one, shapes))
    return self.compiled_shapes

  def answer(self, question, context, *, null_threshold: float | None = None,
             explain: bool = False):
    """The answer to ``question`` about ``context`` (an `Answer`); lists of both: a list.
    ``null_threshold``: δ for this call (default `Reader.null_threshold`). ``explain``: also
    ``Answer.tokens``, every context sub-token's character offsets, final co-attention score and
    POS tag (what the demo page shades)."""
    if not self.is_extractive:
      raise TypeError(f"this is a {self.config.task} (multiple-choice) model: use choose()")
    questions, single = _as_list(question, "question")
    contexts, _ = _as_list(context, "context")
    if len(questions) != len(contexts):
      raise ValueError(f"{len(questions)} questions but {len(contexts)} contexts")
    for i, (q, c) in enumerate(zip(questions, contexts)):
      _check_text(q, "question", i)
      _check_text(c, "context", i)
    records = [SquadExample(str(i), q, c, [], False, [], "", "<Reader.answer>")
               for i, (q, c) in enumerate(zip(questions, contexts))]
    out = self.answer_records(records, null_threshold=null_threshold, explain=explain)
    return out[0] if single else out

  def answer_records(self, records: list[SquadExample], *,
                     null_threshold: float | None = None,
                     explain: bool = False) -> list[Answer]:
    """`answer` on records (their ``qid`` and ``source`` name them in error messages)."""
    if not records:
      return []
    features = self.featurize(records)
    outputs = self.predict(features, explain=explain)
    return self.decode(records, features, outputs, null_threshold=null_threshold,
                       explain=explain)

  def featurize(self, records: list[SquadExample]):
    """Stage 1 of `answer_records` (host): the records' windows (`Features`), their passages
    analysed through `Reader.passages`. Uses the tokenizer: one thread at a time."""
    if self.task.reader_featurize is not None:
      return self.task.reader_featurize(records, self.tokenizer, self.config, self.passages)
    return self.task.featurize(records, self.tokenizer, self.config, is_training=False)

  def predict(self, features, *, explain: bool = False) -> dict[str, np.ndarray]:
    """Stage 2 (the jitted model; JAX releases the GIL while it computes): outputs per window;
    ``explain`` also ``token_scores`` where the model has them."""
    return self._predict(features, with_scores=explain and self.has_token_scores)

  def decode(self, records: list[SquadExample], features, outputs: dict, *,
             null_threshold: float | None = None, explain: bool = False) -> list[Answer]:
    """Stage 3 (host): the `Answer` of each record from its windows' outputs."""
    e, v2 = self.config.eval, self.task.null_answers
    preds, nbest, odds = spans.decode_squad(
        records, features, outputs["start_logits"], outputs["end_logits"],
        n_best_size=e.n_best_size, max_answer_length=e.max_answer_length,
        version_2_with_negative=v2,
        null_score_diff_threshold=self.null_threshold if null_threshold is None
        else null_threshold,
        with_offsets=True)
    answers = []
    for r in records:
      text, cands = preds[r.qid], nbest[r.qid]
      best = next((c for c in cands if c["text"]), None)  # decode_squad's pick
      listed = [{k: c[k] for k in ("text", "start", "end", "score", "probability")}
                for c in cands]
      if best is None:  # no span candidate at all: decode_squad's diff is null + 1e30
        null = next((c for c in cands if not c["text"]), None)
        answers.append(Answer("", None, None, null and null["score"], None, True, None,
                              no_candidate=True, nbest=listed))
      elif not text:  # SQuAD 2.0 null: null - best > δ
        null = next(c for c in cands if not c["text"])
        answers.append(Answer("", None, None, null["score"], null["probability"], True,
                              odds.get(r.qid), nbest=listed))
      else:
        answers.append(Answer(text, best["start"], best["end"], best["score"],
                              best["probability"], False, odds.get(r.qid), nbest=listed))
    if explain:
      for i, a in enumerate(answers):
        a.tokens = self._explain(records[i], i, features, outputs.get("token_scores"))
    return answers

  def _explain(self, record: SquadExample, index: int, features, scores) -> list[dict]:
    """Every context sub-token of example ``index`` once, in context order: from the window
    where it has the most context on both sides (the windows overlap by ``doc_stride``)."""
    from poi_jax.data.pos import PENN_TAGS, SPECIAL_ID
    offsets = features.meta["offsets"]
    tags = features.arrays.get("pos_tags") if tasks.uses_pos(self.config) else None
    best: dict[tuple[int, int], tuple[int, dict]] = {}
    for f in np.flatnonzero(features.arrays["example_index"] == index):
      ctx = np.flatnonzero(offsets[f, :, 0] >= 0)
      for k, i in enumerate(ctx):
        a, b = int(offsets[f, i, 0]), int(offsets[f, i, 1])
        room = min(k, len(ctx) - 1 - k)
        if (a, b) in best and best[(a, b)][0] >= room:
          continue
        tag = None
        if tags is not None:
          t = int(tags[f, i])
          tag = PENN_TAGS[t - 1] if 1 <= t <= len(PENN_TAGS) else (
              "special" if t == SPECIAL_ID else "other")
        best[(a, b)] = (room, {"start": a, "end": b, "text": record.context[a:b],
                               "score": None if scores is None else float(scores[f, i]),
                               "pos": tag})
    return [v for _, v in sorted(best.values(), key=lambda x: (x[1]["start"], x[1]["end"]))]

  def choose(self, passage, question, options):
    """Option probabilities for ``question`` about ``passage`` (a `Choice`); lists of passages,
    questions and option lists: a list."""
    if self.is_extractive:
      raise TypeError(f"this is a {self.config.task} (extractive) model: use answer()")
    passages, single = _as_list(passage, "passage")
    questions, _ = _as_list(question, "question")
    option_lists = [options] if single else list(options)
    if not len(passages) == len(questions) == len(option_lists):
      raise ValueError(f"{len(passages)} passages, {len(questions)} questions and "
                       f"{len(option_lists)} option lists")
    records = []
    for i, (p, q, opts) in enumerate(zip(passages, questions, option_lists)):
      _check_text(p, "passage", i)
      _check_text(q, "question", i)
      if not isinstance(opts, (list, tuple)) or len(opts) < 2:
        raise ValueError(f"item {i}: field 'options' must be a list of at least 2 strings")
      for k, o in enumerate(opts):
        problem = text_problem(o, allow_empty=True)
        if problem:
          raise ValueError(f"item {i}: field 'options': option {k} {problem}")
      records.append(ChoiceExample(str(i), p, q, list(opts), 0, "<Reader.choose>"))
    out = self.choose_records(records)
    return out[0] if single else out

  def choose_records(self, records: list[ChoiceExample]) -> list[Choice]:
    """`choose` on records (their ``qid`` and ``source`` name them in error messages)."""
    if not records:
      return []
    # The arrays are (N, options, L): one featurisation per option count.
    by_count: dict[int, list[int]] = {}
    for i, r in enumerate(records):
      by_count.setdefault(len(r.options), []).append(i)
    out: list = [None] * len(records)
    for idx in by_count.values():
      group = [records[i] for i in idx]
      features = self.task.featurize(group, self.tokenizer, self.config, is_training=False)
      logits = self._predict(features)["logits"]
      for i, r, row in zip(idx, group, logits):
        best = int(np.argmax(row))
        out[i] = Choice(best, r.options[best], _softmax(row).tolist(), row.tolist())
    return out
