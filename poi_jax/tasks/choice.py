"""RACE and DREAM (multiple choice): POI-Net, DUMA or the plain encoder; accuracy (RACE: also per
level)."""
from __future__ import annotations

import functools

import numpy as np

from poi_jax.data import parallel, readers, shards
from poi_jax.data.features import multiple_choice
from poi_jax.data.features.multiple_choice import build_choice_features
from poi_jax.data.pos import pos_version
from poi_jax.data.readers import tfds as tfds_reader
from poi_jax.eval import choice
from poi_jax.models import build
from poi_jax.tasks import base
from poi_jax.tasks import squad as squad_task

MODEL_KEYS = ("input_ids", "attention_mask", "token_type_ids", "pos_tags", "con_start",
              "con_end", "p_end", "q_start", "q_end", "labels")
# (B, C, L): each option's sequence; a batch is cut to the bucket of its longest option.
LENGTH_KEYS = ("input_ids", "attention_mask", "token_type_ids", "pos_tags")


def bucketable(config) -> bool:
  """Every head but DUMA's ``released`` variant: POI-Net max-pools over its domains, the plain
  encoder over the passage, DUMA ``paper`` takes masked means; ``released`` averages its
  co-attended sequences over all ``max_seq_length`` positions, padding included
  (`poi_jax.layers.duma`), so cutting a batch would change its logits."""
  m = config.model
  return not (m.head == "duma" and m.duma.variant == "released")


def _read_race(config, split):
  source = squad_task.tfds_source(config, split)
  if source:  # tfds:race/high:dev (the config picks the level)
    return tfds_reader.read_tfds(source, hint=squad_task.tfds_hint(config, split))
  return readers.read_race(base.local_path(config, split), config.data.race_level)


def _read_dream(config, split):
  source = squad_task.tfds_source(config, split)
  if source:  # TFDS has no DREAM: read_tfds says so in one line
    return tfds_reader.read_tfds(source, hint=squad_task.tfds_hint(config, split))
  return readers.read_dream(base.local_path(config, split))


def feature_options(config) -> dict:
  """Every option of `build_choice_features` that the config sets (also the cache key)."""
  return dict(max_seq_length=config.data.max_seq_length,
              with_pos=base.uses_pos(config),
              pos_alignment=config.data.pos_alignment,
              pos_lowercase=config.data.pos_lowercase)


def featurize(records, tokenizer, config, *, is_training: bool):
  """Multiple-choice features of ``records`` in memory, built by ``data.num_workers`` worker
  processes (the engine reads feature shards instead: `shard_spec`). ``is_training`` changes
  nothing: every option of every question, in both splits."""
  options = feature_options(config)
  multiple_choice.check_choice_examples(records)  # all records, before any tokenising
  return parallel.featurize(
      build_choice_features, multiple_choice.merge_choice_features, records, tokenizer, options,
      num_workers=config.data.num_workers,
      desc=f"{config.task} {'train' if is_training else 'eval'} features")


def shard_spec(config, tokenizer, split: str) -> shards.ShardSpec:
  """Multiple-choice features as feature shards (one row per question); RACE's level is part
  of the key (it selects the records)."""
  del tokenizer
  options = feature_options(config)
  return shards.ShardSpec(
      kind="choice", build=build_choice_features, merge=multiple_choice.merge_choice_features,
      options=options,
      key_options=dict(feature_version=multiple_choice.FEATURE_VERSION,
                       nltk=pos_version() if options["with_pos"] else None),
      read_options=({"race_level": config.data.race_level} if config.task == "race" else {}),
      check=multiple_choice.check_choice_examples,
      validate=(functools.partial(base.validate_model_batch, model_keys=MODEL_KEYS)
                if split == "train" else None))


def build_model(config, rngs):
  from poi_jax.models import poi_net
  m = config.model
  enc_cfg = build.encoder_config(config)
  cls = poi_net.PoiNetForMultipleChoice
  if m.head == "poi":
    return cls(enc_cfg, **m.coattention, pos_embedding=m.pos_embedding, rngs=rngs)
  if m.head == "none":
    return cls(enc_cfg, variant="none", pos_embedding=False, rngs=rngs)
  if m.head == "duma":
    from poi_jax.models import duma
    return duma.DumaForMultipleChoice(enc_cfg, **m.duma, pos_embedding=m.pos_embedding,
                                      rngs=rngs)
  raise ValueError(f"unknown model.head={m.head!r} for task {config.task!r} "
                   f"(known: poi, duma, none)")


class ChoiceEvaluator(base.Evaluator):
  """``predictions.json`` (question id -> option index) and the accuracy (RACE: per level),
  keeping whether each question was answered right and its level."""

  def __init__(self, config, out_dir, *, score=True):
    super().__init__(config, out_dir, score=score)
    self.preds = self.open_json("predictions.json")
    self.correct: list[np.ndarray] = []
    self.levels: list[str] = []

  def add(self, records, features, outputs):
    del records
    picked = np.asarray(outputs["logits"]).argmax(-1)
    for qid, p in zip(features.meta["ids"], picked):
      self.preds.add(qid, int(p))
    self.correct.append(picked == np.asarray(features.arrays["labels"]))
    self.levels.extend(features.meta["levels"])

  def scores(self):
    return choice.accuracy(np.concatenate(self.correct) if self.correct else np.zeros(0, bool),
                           self.levels)


def probe_records(options: int):
  """One question with ``options`` options (`poi_jax.sizing`'s shape probe)."""
  from poi_jax.data.records import ChoiceExample
  words = " ".join(f"word{i % 50}" for i in range(400))
  return lambda: [ChoiceExample("q0", words, "what is it?",
                                [f"option {k}" for k in range(options)], 0, "probe")]


def _task(name, read, options):
  return base.Task(name=name, metric="accuracy", read=read, featurize=featurize,
                   answers="choice", probe_records=probe_records(options),
                   build_model=build_model, evaluator=ChoiceEvaluator, model_keys=MODEL_KEYS,
                   load_pretrained=squad_task.load_pretrained,
                   export_pretrained=squad_task.export_pretrained,
                   describe_head=squad_task.describe_head, shard_spec=shard_spec,
                   length_keys=LENGTH_KEYS, bucketable=bucketable)


# Options per question: RACE 4, DREAM 3.
TASKS = {"race": _task("race", _read_race, 4), "dream": _task("dream", _read_dream, 3)}
