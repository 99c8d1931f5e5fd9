"""QOPN (Question-Oriented Propagation Network) for long-article extractive QA (NewsQA, NLQuAD).

Context encoding (eq. 1): the K non-overlapping segments of an article, each laid out as
``[CLS] Q [SEP] S^k [SEP]`` in the encoder's own template (`poi_jax.data.features.segments`), are
encoded as ONE batch of B*K sequences by one shared encoder. Multi-step reasoning
(`poi_jax.layers.qopn`): ``num_blocks`` blocks of QOII -> GBIF -> QGIP. Answer prediction (eq. 7):
``p^s = softmax(Z w_s)``, ``p^e = softmax(Z w_e)`` over the concatenated context rows Z of all
segments: ONE softmax over the whole article, so a span may cross a segment boundary.

Decisions where the paper is silent (issue 9; see also `poi_jax.layers.qopn`):

* The span head ``qa_outputs`` (D -> 2: w_s, w_e) has no bias (the paper states none, and a bias
  is a constant under the softmax). Only segment tokens are answer candidates: separators,
  question rows, padding and padded segments are masked (``span_mask``) with ``finfo.min``, so
  their probability is exactly 0.
* Outputs: ``start_logits``/``end_logits`` ``(B, K*L)``, position ``k*L + t`` = row t of segment
  k (masked positions hold ``finfo.min``). Labels ``start_positions``/``end_positions`` ``(B,)``
  use the same flat index; -1 = no label (an evaluation answer past the last segment).
* Loss (eq. 8): ``-(log p^s_{y^s} + log p^e_{y^e})`` (the sum of the two NLLs; the paper's
  parenthesisation is broken) averaged over the examples with ``example_mask`` 1 and a label.
* Decoding (`decode_spans`): the best ``s <= e`` (in article order) with ``e - s + 1 <=
  max_answer_length`` article tokens, maximising ``p^s_s p^e_e``.

Batch (``model_keys`` of the task): ``input_ids, attention_mask, token_type_ids (B, K, L)``,
``question_rows (B,)`` (1 + question tokens), ``segment_mask (B, K)``, ``span_mask (B, K, L)``,
``start_positions, end_positions (B,)``.
"""
from __future__ import annotations

from typing import Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from poi_jax.layers import common
from poi_jax.layers import qopn as qopn_lib
from poi_jax.models import checks, encoders

NEG = float(np.finfo(np.float32).min)


class QopnBatchError(checks.BatchError):
  pass


def check_qopn_batch(batch: Mapping[str, np.ndarray], question_window: int | None = None) -> None:
  """Host-side checks of a QOPN batch; the error names the field and the row (before compute)."""
  for name in ("input_ids", "question_rows", "segment_mask", "span_mask"):
    if name not in batch:
      raise QopnBatchError(f"batch has no field {name!r}")
  shape = np.shape(batch["input_ids"])
  if len(shape) != 3:
    raise QopnBatchError(f"field 'input_ids' must be (batch, segments, length), got {shape}")
  b, k, l = shape
  for name in ("attention_mask", "token_type_ids", "span_mask"):
    if name in batch and np.shape(batch[name]) != shape:
      raise QopnBatchError(f"field {name!r} has shape {np.shape(batch[name])}, expected {shape}")
  for name, want in (("question_rows", (b,)), ("segment_mask", (b, k)),
                     ("start_positions", (b,)), ("end_positions", (b,))):
    if name in batch and np.shape(batch[name]) != want:
      raise QopnBatchError(f"field {name!r} has shape {np.shape(batch[name])}, expected {want}")
  rows = lambda bad: checks._rows(np.asarray(bad))
  qr = np.asarray(batch["question_rows"])
  bad = (qr < 1) | (qr >= l)
  if question_window is not None:
    bad |= qr > question_window
  if bad.any():
    raise QopnBatchError(f"field 'question_rows' outside 1..{min(l - 1, question_window or l)} "
                         f"in row(s) {rows(bad)}")
  seg = np.asarray(batch["segment_mask"])
  if (seg[:, 0] == 0).any():
    raise QopnBatchError(f"field 'segment_mask': no real segment in row(s) {rows(seg[:, 0] == 0)}")
  span = np.asarray(batch["span_mask"]) > 0
  if "attention_mask" in batch:
    outside = (span & ~(np.asarray(batch["attention_mask"]) > 0)).any(axis=(1, 2))
    if outside.any():
      raise QopnBatchError(f"field 'span_mask' marks padding tokens in row(s) {rows(outside)}")
  for name in ("start_positions", "end_positions"):
    if name not in batch:
      continue
    p = np.asarray(batch[name])
    flat = span.reshape(b, k * l)
    bad = (p >= k * l) | (p < -1)
    ok = ~bad & (p >= 0)
    bad |= ok & ~flat[np.arange(b), np.where(ok, p, 0)]
    if bad.any():
      raise QopnBatchError(f"field {name!r} is not a segment token (span_mask) in row(s) "
                           f"{rows(bad)}")


def global_span_logits(y: jax.Array, qa_outputs: nnx.Linear, span_mask: jax.Array):
  """Eq. 7 over all segments: ``y (B, K, L, D)``, ``span_mask (B, K, L)`` -> start and end logits
  ``(B, K*L)`` with non-candidates at ``finfo.min``."""
  b, k, l, _ = y.shape
  logits = qa_outputs(y.astype(jnp.float32))
  ok = span_mask.reshape(b, k * l) > 0
  start = jnp.where(ok, logits[..., 0].reshape(b, k * l), NEG)
  end = jnp.where(ok, logits[..., 1].reshape(b, k * l), NEG)
  return start, end


def global_span_loss(start_logits, end_logits, start_positions, end_positions,
                     example_mask=None) -> jax.Array:
  """Eq. 8: mean over labelled examples of ``-(log p^s_{y^s} + log p^e_{y^e})``."""
  valid = (start_positions >= 0) & (end_positions >= 0)
  nll = lambda lg, y: optax.softmax_cross_entropy_with_integer_labels(
      lg.astype(jnp.float32), jnp.where(valid, y, 0))
  per = nll(start_logits, start_positions) + nll(end_logits, end_positions)
  w = valid.astype(jnp.float32)
  if example_mask is not None:
    w = w * example_mask.astype(jnp.float32)
  return jnp.sum(jnp.where(w > 0, per, 0.0) * w) / jnp.maximum(jnp.sum(w), 1.0)


class QopnForQuestionAnswering(nnx.Module):
  """Encoder + reasoning blocks + global span head.

  Args:
    encoder_config: the encoder (BERT, ALBERT or RoBERTa).
    num_blocks: reasoning blocks (paper: tuned in 1..5, 3 on NLQuAD, 4 on NewsQA); 0 = the
      encoder with the global softmax only.
    num_heads: heads of QOII/QGIP (< 0: the encoder's).
    block_style: ``paper_residual`` (eq. 2-3 + residual + LayerNorm; the default), ``paper``
      (eq. 2-3 literally: does not train) or ``transformer`` (`poi_jax.layers.qopn`).
    output_projection: W^O after the heads' concatenation (eq. 3 has none).
    question_window: static bound on ``question_rows`` (1 + the longest question).
    scan_blocks: stacked block weights run with ``nnx.scan`` (else a loop).
    use_qoii, use_gbif, use_qgip: the ablations of the paper's Table 4.
    dropout: in the reasoning blocks (< 0: the encoder's hidden dropout).
  """

  def __init__(self, encoder_config: encoders.EncoderConfig, *, num_blocks: int = 3,
               num_heads: int = -1, block_style: str = "paper_residual",
               output_projection: bool = False, question_window: int = 65,
               scan_blocks: bool = True, use_qoii: bool = True, use_gbif: bool = True,
               use_qgip: bool = True, dropout: float = -1.0, rngs: nnx.Rngs):
    cfg = encoder_config
    self.config = cfg
    dtype = common.compute_dtype(cfg.dtype)
    self.encoder = encoders.build_encoder(cfg, rngs=rngs)
    self.question_window = int(question_window)
    self.reasoning = qopn_lib.Reasoning(
        cfg.hidden_size, cfg.num_attention_heads if num_heads < 0 else num_heads,
        num_blocks=num_blocks, scan_blocks=scan_blocks, question_window=question_window,
        block_style=block_style, output_projection=output_projection, use_qoii=use_qoii, use_gbif=use_gbif, use_qgip=use_qgip,
        eps=cfg.layer_norm_eps, init_std=cfg.initializer_range,
        dropout=cfg.hidden_dropout_prob if dropout < 0 else dropout, dtype=dtype, rngs=rngs)
    self.qa_outputs = common.dense(cfg.hidden_size, 2, ("embed", None), use_bias=False,
                                   init_std=cfg.initializer_range, dtype=jnp.float32, rngs=rngs)
    self.rngs = nnx.Rngs(dropout=rngs.dropout())

  def encode(self, batch, *, deterministic: bool) -> jax.Array:
    """The K segments as one batch of B*K sequences: ``-> H (B, K, L, D)``."""
    b, k, l = batch["input_ids"].shape
    flat = lambda x: x.reshape(b * k, l)
    ids = flat(batch["input_ids"])
    mask = flat(batch["attention_mask"]) if "attention_mask" in batch else jnp.ones_like(ids)
    types = flat(batch["token_type_ids"]) if "token_type_ids" in batch else jnp.zeros_like(ids)
    h = self.encoder(ids, mask, types, deterministic=deterministic).last_hidden_state
    return h.reshape(b, k, l, -1)

  def __call__(self, batch: Mapping[str, jax.Array], *, deterministic: bool = True):
    if checks.is_concrete(batch):
      check_qopn_batch(batch, self.question_window)
    h = self.encode(batch, deterministic=deterministic)
    key = None if deterministic else self.rngs.dropout()
    mask = batch.get("attention_mask")
    mask = jnp.ones(h.shape[:3], jnp.float32) if mask is None else mask
    y = self.reasoning(h, mask, batch["question_rows"], batch["segment_mask"], key,
                       deterministic=deterministic)
    start, end = global_span_logits(y, self.qa_outputs, batch["span_mask"])
    return {"start_logits": start, "end_logits": end}

  def loss(self, batch, outputs) -> jax.Array:
    return global_span_loss(outputs["start_logits"], outputs["end_logits"],
                            batch["start_positions"], batch["end_positions"],
                            batch.get("example_mask"))


def best_span(start: np.ndarray, end: np.ndarray, max_answer_length: int) -> tuple[int, int, float]:
  """Best ``s <= e < s + max_answer_length`` of ``start[s] + end[e]`` over 1-D candidate logits
  in article order: ``(s, e, score)``. O(T * max_answer_length) numpy, no T x T matrix."""
  t = len(start)
  best = (0, 0, -np.inf)
  for d in range(min(max_answer_length, t)):
    score = start[:t - d] + end[d:]
    i = int(np.argmax(score))
    if score[i] > best[2]:
      best = (i, i + d, float(score[i]))
  return best


def decode_spans(start_logits: np.ndarray, end_logits: np.ndarray, token_index: np.ndarray,
                 offsets: np.ndarray, contexts: list[str], max_answer_length: int):
  """Answers from the global logits.

  Args:
    start_logits, end_logits: ``(N, K*L)``.
    token_index: ``(N, K*L)`` article token index of each candidate position (-1 elsewhere).
    offsets: ``(N, K*L, 2)`` character span of each position in its article.
    contexts: the N articles.
  Returns:
    list of ``(text, char_start, char_end, score)``.
  """
  out = []
  for n, ctx in enumerate(contexts):
    pos = np.nonzero(token_index[n] >= 0)[0]
    pos = pos[np.argsort(token_index[n][pos], kind="stable")]
    if not len(pos):
      out.append(("", 0, 0, float("-inf")))
      continue
    s, e, score = best_span(start_logits[n][pos].astype(np.float64),
                            end_logits[n][pos].astype(np.float64), max_answer_length)
    a, b = int(offsets[n][pos[s]][0]), int(offsets[n][pos[e]][1])
    out.append((ctx[a:b], a, b, score))
  return out
