"""Part-of-speech tags for POI-Net's POS embedding (paper §2.1, ``parity/SPEC.md`` §5).

Tag ids: 0 padding, 1..36 the Penn Treebank tags below, 37 special tokens ([CLS], [SEP], ...),
38 every other tag (punctuation, ``$``, ...) and empty sub-tokens. NLTK's ``word_tokenize`` and
averaged perceptron tagger read their data from ``NLTK_DATA`` (``punkt_tab``,
``averaged_perceptron_tagger_eng``); a missing one is fetched on first use with NLTK's own
downloader, and where that fails (offline) the run stops in one line naming it and ``NLTK_DATA``.

`align_original` reproduces the released POI-Net alignment exactly, quirks included: each
sub-token (with ``▁`` removed) takes the tag of the current NLTK word, moving to the next word
only when it is not a substring of the current word but is of the next one.

Case (``data.pos_lowercase``, issue 18): the released code tags the *lowercased* text. NLTK's
averaged perceptron reads case (its features include the word itself and its prefix/suffix, so
"paris" and "Paris" are different words to it), and lowercasing suppresses most proper nouns
(NNP), the very tag of the paper's POS example. So `tag_words` tags the cased text by default
(``lowercase=False``); ``lowercase=True`` reproduces the released pipeline and its fixture
(``parity/poi_pos_alignment.json``). On the shared SQuAD 2.0 subset the NNP/NNPS share of the
context words goes from 0.2% (lowercased) to 11.7% (cased), and 15% of the sub-token tag ids the
model sees change (docs/data.md: the command and the counts). The `original` alignment matches
sub-tokens against the lowercased words either way, so only the tags change.
"""
from __future__ import annotations

import functools
from typing import Sequence

PENN_TAGS = ("CC", "CD", "DT", "EX", "FW", "IN", "JJ", "JJR", "JJS", "LS", "MD", "NN", "NNS",
             "NNP", "NNPS", "PDT", "POS", "PRP", "PRP$", "RB", "RBR", "RBS", "RP", "SYM", "TO",
             "UH", "VB", "VBD", "VBG", "VBN", "VBP", "VBZ", "WDT", "WP", "WP$", "WRB")
POS_TAG_MAP = {t: i + 1 for i, t in enumerate(PENN_TAGS)}
PAD_ID, SPECIAL_ID, OTHER_ID = 0, 37, 38
NUM_POS_IDS = 40
_RESOURCES = (("tokenizers/punkt_tab/english", "punkt_tab"),
              ("taggers/averaged_perceptron_tagger_eng", "averaged_perceptron_tagger_eng"))


class NltkResourceError(RuntimeError):
  """An NLTK data package is missing and could not be fetched (names it and how to provide
  it)."""


# ``POI_JAX_NLTK_DOWNLOAD=0``: never fetch a missing resource (an air-gapped cluster whose
# NLTK_DATA is the only source, or a test of the offline error).
DOWNLOAD_ENV = "POI_JAX_NLTK_DOWNLOAD"
DOWNLOAD_TIMEOUT_S = 30.0  # a network that drops packets must not hang a run's start


def tag_id(tag: str) -> int:
  return POS_TAG_MAP.get(tag, OTHER_ID)


_resources_found_in: tuple | None = None  # the nltk.data.path the resources were found on


def _missing() -> list[str]:
  import nltk
  missing = []
  for path, package in _RESOURCES:
    try:
      nltk.data.find(path)
    except LookupError:
      missing.append(package)
  return missing


def _download(packages: Sequence[str]) -> str | None:
  """Fetches ``packages`` with NLTK's own downloader into its default directory (``~/nltk_data``
  or the environment's), one process at a time (a lock file there); None when done, else why
  not (offline, refused, a timeout)."""
  import contextlib
  import fcntl
  import io
  import os
  import socket
  import warnings

  import nltk
  target = nltk.downloader.Downloader().default_download_dir()
  try:
    os.makedirs(target, exist_ok=True)
    lock = open(os.path.join(target, ".poi_jax_download.lock"), "w")
  except OSError as e:
    return f"cannot write {target}: {e}"
  previous = socket.getdefaulttimeout()
  quiet = io.StringIO()
  try:
    fcntl.flock(lock, fcntl.LOCK_EX)  # the data workers of one run start together
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet), \
        warnings.catch_warnings():
      warnings.simplefilter("ignore")
      for package in packages:
        try:
          nltk.data.find(dict((p, q) for q, p in _RESOURCES)[package])
          continue  # another process fetched it while this one waited for the lock
        except LookupError:
          pass
        if not nltk.download(package, download_dir=target, quiet=True, raise_on_error=True,
                             print_error_to=quiet):
          return f"NLTK's downloader did not fetch {package!r}"
  except Exception as e:  # pylint: disable=broad-except  # offline, refused, a timeout
    return str(e).splitlines()[0] if str(e) else type(e).__name__
  finally:
    socket.setdefaulttimeout(previous)
    lock.close()
  return None


def ensure_nltk_resources() -> None:
  """Makes sure NLTK's tokenizer and tagger are there: found on ``nltk.data.path``
  (``NLTK_DATA`` first), else fetched on first use with NLTK's own downloader (unless
  ``POI_JAX_NLTK_DOWNLOAD=0``); raises `NltkResourceError` in one line naming the resource and
  ``NLTK_DATA`` when neither works (offline). Once found, not searched again in this process
  while ``nltk.data.path`` stays the same (the search costs ~1 ms, as much as tagging a
  sentence)."""
  global _resources_found_in
  import os

  import nltk
  if _resources_found_in == tuple(nltk.data.path):
    return
  missing = _missing()
  if missing:
    fetch = os.environ.get(DOWNLOAD_ENV, "1").strip().lower() not in ("0", "false", "off", "no")
    why = _download(missing) if fetch else f"{DOWNLOAD_ENV}=0"
    still = _missing()
    if still:
      raise NltkResourceError(
          f"NLTK resource {still[0]!r} not found (searched {', '.join(nltk.data.path)}) and not "
          f"fetched ({why}): offline, set NLTK_DATA to a directory holding a copy of "
          f"{', '.join(still)}, or run `python -m nltk.downloader {' '.join(still)}` where "
          f"NLTK's data host is reachable")
  _resources_found_in = tuple(nltk.data.path)


@functools.lru_cache(maxsize=4096)
def tag_words(text: str, *, lowercase: bool = False) -> tuple[tuple[str, str], ...]:
  """``((word, Penn tag), ...)`` from NLTK's ``word_tokenize`` + perceptron tagger, on the text
  as written (``lowercase=True``: on the lowercased text, as the released POI-Net pipeline tags
  it; module docstring). Cached: SQuAD asks ~5 questions per paragraph and RACE/DREAM one per
  option, so each passage is tagged once."""
  import nltk
  ensure_nltk_resources()
  return tuple(nltk.pos_tag(nltk.word_tokenize(text.lower() if lowercase else text)))


@functools.lru_cache(maxsize=1)
def pos_version() -> str:
  """Identity of the tagging (NLTK version + a hash of its tagger and punkt files), part of the
  feature cache key: other tagger data gives other tags."""
  import hashlib
  import os

  import nltk
  ensure_nltk_resources()
  h = hashlib.sha256(nltk.__version__.encode())
  for path, _ in _RESOURCES:
    root = str(nltk.data.find(path))
    for d, _, files in sorted(os.walk(root)):
      for name in sorted(files):
        with open(os.path.join(d, name), "rb") as f:
          h.update(name.encode() + b"\0" + f.read())
  return f"nltk-{nltk.__version__}-{h.hexdigest()[:16]}"


def align_original_indices(subtokens: Sequence[str], word_tags: Sequence[tuple[str, str]], *,
                           strict: bool = True) -> list[int]:
  """The NLTK word index the released alignment gives each sub-token (-1: empty sub-token).

  ``strict``: raise IndexError where the released code does (a sub-token at the last word that
  is not in it, e.g. WordPiece's ``##s`` of a final "normans"), so a caller sees the failure the
  original would have had. ``strict=False`` keeps the last word there instead (the feature
  builders use it, and report where it happened).
  """
  out, k = [], 0
  words = [w for w, _ in word_tags]
  for s in subtokens:
    s = s.replace("\u2581", "")
    if s == "":
      out.append(-1)
      continue
    if s not in words[k] and (strict or k + 1 < len(words)) and s in words[k + 1]:
      k += 1
    out.append(k)
  return out


def align_original(subtokens: Sequence[str], word_tags: Sequence[tuple[str, str]], *,
                   strict: bool = True) -> list[int]:
  """The released alignment (SPEC §5): one tag id per sub-token (see
  `align_original_indices`; empty sub-tokens get 38)."""
  return [OTHER_ID if k < 0 else tag_id(word_tags[k][1])
          for k in align_original_indices(subtokens, word_tags, strict=strict)]


def original_layout(question_ids: Sequence[int], context_ids: Sequence[int],
                    max_seq_length: int) -> tuple[list[int], int, int]:
  """The released ``[CLS] Q [SEP] C [SEP]`` layout of POS ids -> ``(pos_tags, con_start,
  con_end)``. Like the original, the question length is not truncated here (a quirk)."""
  nq = len(question_ids)
  con_len = min(max_seq_length - nq - 3, len(context_ids))
  tags = [SPECIAL_ID] + list(question_ids) + [SPECIAL_ID] + list(context_ids[:con_len]) + [
      SPECIAL_ID]
  tags += [PAD_ID] * (max_seq_length - len(tags))
  return tags[:max_seq_length], nq + 1, nq + con_len + 2
