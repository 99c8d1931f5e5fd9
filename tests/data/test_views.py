"""DASSA views on a hand-made annotated document (expected arrays written by hand), the offline
views (punkt sentences, lexicon connectives) and bad annotations."""
from __future__ import annotations

import numpy as np
import pytest

from poi_jax.data.features import annotations, offline_views, views

L = views.LABELS
SENTENCES = [
    ["Jeff", "went", "home", "because", "he", "was", "hungry", "."],  # tokens 0..7
    ["He", "ate", "pasta", "."],  # 8..11
    ["Then", "Mary", "called", "him", "."],  # 12..16
    ["She", "was", "worried", "."],  # 17..20
]
T = 21


def _annotated():
  return {
      "document_id": "doc-1",
      "summary_parse": {"sentences": [
          {"tokens": SENTENCES[0], "srl": {"verbs": [
              {"verb": "went", "tags": ["B-ARG0", "B-V", "B-ARGM-DIR", "O", "O", "O", "O", "O"]},
              {"verb": "was", "tags": ["O", "O", "O", "O", "B-ARG1", "B-V", "B-ARG2", "O"]}]}},
          {"tokens": SENTENCES[1], "srl": {"verbs": [
              {"verb": "ate", "tags": ["B-ARG0", "B-V", "B-ARG1", "O"]}]}},
          {"tokens": SENTENCES[2], "srl": {"verbs": [
              {"verb": "called", "tags": ["B-ARGM-TMP", "B-ARG0", "B-V", "B-ARG1", "O"]}]}},
          {"tokens": SENTENCES[3], "srl": {"verbs": []}},
      ]},
      "sdp": [
          {"Type": "Explicit", "Sense": "Contingency.Cause.Reason",
           "Arg1": {"Sent": 0, "Span": [0, 3]}, "Conn": {"Sent": 0, "Span": [3, 4]},
           "Arg2": {"Sent": 0, "Span": [4, 7]}},
          {"Type": "Implicit", "Sense": "Temporal.Asynchronous.Precedence",
           "Arg1": {"Sent": 1, "Span": [0, 3]}, "Arg2": {"Sent": 2, "Span": [0, 4]}},
          {"Type": "Implicit", "Sense": "Contingency.Cause.Result",
           "Arg1": {"Sent": 2, "Span": [1, 4]}, "Arg2": {"Sent": 3, "Span": [0, 3]}},
          {"Type": "EntRel", "Sense": "EntRel",
           "Arg1": {"Sent": 0, "Span": [0, 7]}, "Arg2": {"Sent": 1, "Span": [0, 3]}},
      ],
      "coref_clusters": [
          {"mentions": [{"start": 0, "end": 1}, {"start": 4, "end": 5}, {"start": 8, "end": 9},
                        {"start": 15, "end": 16}]},
          {"mentions": [{"start": 13, "end": 14}, {"start": 17, "end": 18}]},
      ],
  }


def _doc():
  return annotations.parse_document(_annotated(), source="ann.jsonl", line=3)


def _row(assignments: dict[int, int] | None = None, fill: int = 0):
  out = np.full(T, fill, np.int32)
  for i, v in (assignments or {}).items():
    out[i] = v
  return out


def test_srl_views():
  labels, scopes = views.srl_views(_doc(), 3)
  s = lambda tag: L[f"SRL__{tag}"]
  exp_labels = np.stack([
      _row({0: s("B-ARG0"), 1: s("B-V"), 2: s("B-ARGM-DIR"), 8: s("B-ARG0"), 9: s("B-V"),
            10: s("B-ARG1"), 12: s("B-ARGM-TMP"), 13: s("B-ARG0"), 14: s("B-V"),
            15: s("B-ARG1")}),
      _row({4: s("B-ARG1"), 5: s("B-V"), 6: s("B-ARG2")}),
      _row()])
  # Scope: sentence id + 1 over the whole sentence holding a v-th predicate; sentence 3 has none.
  exp_scopes = np.stack([
      _row({**{i: 1 for i in range(8)}, **{i: 2 for i in range(8, 12)},
            **{i: 3 for i in range(12, 17)}}),
      _row({i: 1 for i in range(8)}),
      _row()])
  np.testing.assert_array_equal(labels, exp_labels)
  np.testing.assert_array_equal(scopes, exp_scopes)


def test_explicit_relation_views_with_and_without_sense():
  labels, scopes = views.dr_exp_views(_doc(), 2)
  p = "DR_EXP__Contingency.Cause.Reason__"
  exp = _row({0: L[p + "Arg1"], 1: L[p + "Arg1"], 2: L[p + "Arg1"], 3: L[p + "Conn"],
              4: L[p + "Arg2"], 5: L[p + "Arg2"], 6: L[p + "Arg2"]})
  np.testing.assert_array_equal(labels, np.stack([exp, _row()]))
  # Scope: the whole Arg1 sentence (the final "." included).
  np.testing.assert_array_equal(scopes, np.stack([_row({i: 1 for i in range(8)}), _row()]))
  labels, _ = views.dr_exp_views(_doc(), 1, sense=False)
  assert labels[0, 3] == L["DR_EXP__Conn"] and labels[0, 0] == L["DR_EXP__Arg1"]


def test_non_explicit_views_follow_the_odd_even_rule():
  labels, scopes = views.dr_nonexp_views(_doc(), 2)
  p1, p2 = "DR_NONEXP__Temporal.Asynchronous.Precedence__", "DR_NONEXP__Contingency.Cause.Result__"
  # Implicit (1 -> 2): view (1 + 1) % 2 = 0, scope 2 on its spans only; the EntRel is not used.
  exp_l0 = _row({8: L[p1 + "Arg1"], 9: L[p1 + "Arg1"], 10: L[p1 + "Arg1"],
                 12: L[p1 + "Arg2"], 13: L[p1 + "Arg2"], 14: L[p1 + "Arg2"], 15: L[p1 + "Arg2"]})
  exp_s0 = _row({i: 2 for i in (8, 9, 10, 12, 13, 14, 15)})
  # Implicit (2 -> 3): view (2 + 1) % 2 = 1, scope 3.
  exp_l1 = _row({13: L[p2 + "Arg1"], 14: L[p2 + "Arg1"], 15: L[p2 + "Arg1"],
                 17: L[p2 + "Arg2"], 18: L[p2 + "Arg2"], 19: L[p2 + "Arg2"]})
  exp_s1 = _row({i: 3 for i in (13, 14, 15, 17, 18, 19)})
  np.testing.assert_array_equal(labels, np.stack([exp_l0, exp_l1]))
  np.testing.assert_array_equal(scopes, np.stack([exp_s0, exp_s1]))
  # The paper's reading (AltLex/EntRel included) is an option: the EntRel (0 -> 1) goes to view 1.
  labels, scopes = views.dr_nonexp_views(_doc(), 2, types=("Implicit", "EntRel"))
  assert labels[1, 0] == L["DR_NONEXP__EntRel__Arg1"] and scopes[1, 0] == 1


def test_coref_view_is_full_context_and_repeated():
  labels, scopes = views.coref_views(_doc(), 3)
  c1, c2 = L["COREF__C01"], L["COREF__C02"]
  exp = _row({0: c1, 4: c1, 8: c1, 15: c1, 13: c2, 17: c2})
  np.testing.assert_array_equal(labels, np.stack([exp] * 3))
  np.testing.assert_array_equal(scopes, np.ones((3, T), np.int32))


def test_coref_cap_keeps_the_smallest_clusters_like_the_original():
  doc = annotations.Document("d", [["a", "b", "c", "d", "e", "f"]],
                       coref=[[(0, 1), (1, 2), (2, 3)], [(3, 4)], [(4, 5), (5, 6)]])
  labels, _ = views.coref_views(doc, 1, max_clusters=2)
  # Clusters 1 (1 mention) and 2 (2 mentions) kept, numbered in document order.
  np.testing.assert_array_equal(labels[0], [0, 0, 0, L["COREF__C01"], L["COREF__C02"],
                                            L["COREF__C02"]])
  labels, _ = views.coref_views(doc, 1, max_clusters=2, keep="largest")
  np.testing.assert_array_equal(labels[0], [L["COREF__C01"]] * 3 + [0] + [L["COREF__C02"]] * 2)


def test_sentence_span_views():
  labels, scopes = views.sent_span_views(_doc(), 2)
  lab = lambda k: L[f"SENT__Sent{k}"]
  sizes = [8, 4, 5, 4]
  expand = lambda per_sent: np.repeat(per_sent, sizes)
  np.testing.assert_array_equal(labels[0], expand([lab(1), lab(2), lab(3), lab(1)]))
  np.testing.assert_array_equal(scopes[0], expand([1, 1, 1, 2]))
  np.testing.assert_array_equal(labels[1], expand([lab(2), lab(3), lab(1), lab(2)]))
  np.testing.assert_array_equal(scopes[1], expand([1, 1, 2, 2]))


def test_table2_allocation_stacks_views_in_order():
  labels, scopes = views.document_views(_doc(), "srl_dr_all_coref")
  assert labels.shape == scopes.shape == (8, T)
  np.testing.assert_array_equal(labels[:3], views.srl_views(_doc(), 3)[0])
  np.testing.assert_array_equal(labels[3:5], views.dr_exp_views(_doc(), 2)[0])
  np.testing.assert_array_equal(labels[5:7], views.dr_nonexp_views(_doc(), 2)[0])
  np.testing.assert_array_equal(scopes[7], np.ones(T))
  assert views.parse_heads("srl:3,dr_exp:2") == (("srl", 3), ("dr_exp", 2))
  assert sum(n for _, n in views.HEAD_PRESETS["srl_dr_all"]) == 7
  assert views.document_views(_doc(), "baseline")[0].shape == (0, T)
  with pytest.raises(ValueError, match="dr_nonexp"):
    views.parse_heads("dr_nonexp:3")
  with pytest.raises(ValueError, match="unknown view type"):
    views.parse_heads("semantics:2")


def test_crop_to_800_tokens():
  long = annotations.Document("d", [["w"] * 500, ["x"] * 500])
  labels, scopes = views.crop(*views.sent_span_views(long, 1), 800)
  assert labels.shape == (1, 800)
  np.testing.assert_array_equal(scopes[0], np.ones(800))
  np.testing.assert_array_equal(labels[0, 499:501], [L["SENT__Sent1"], L["SENT__Sent2"]])


def test_offline_sentences_and_connectives():
  tokens = ("Jeff went home because he was hungry . He ate pasta and then he slept but he "
            "woke up . In fact nobody called .").split()
  doc = offline_views.offline_document("d", tokens)
  assert [len(s) for s in doc.sentences] == [8, 12, 5]
  # Connectives: "because" (sentence 0), "and", "then", "but" (sentence 1; the view keeps 2),
  # "in fact" (sentence 2, multi-token, sentence-initial: empty Arg1).
  conns = [(r.conn.sent, r.conn.start, r.conn.end) for r in doc.relations]
  assert conns == [(0, 3, 4), (1, 3, 4), (1, 4, 5), (1, 7, 8), (2, 0, 2)]
  labels, scopes = views.dr_exp_views(doc, 2, sense=False)
  a1, a2, c = L["DR_EXP__Arg1"], L["DR_EXP__Arg2"], L["DR_EXP__Conn"]
  np.testing.assert_array_equal(labels[0, 8:20], [a1, a1, a1, c] + [a2] * 8)
  np.testing.assert_array_equal(labels[1, 8:20], [a1] * 4 + [c] + [a2] * 7)
  np.testing.assert_array_equal(labels[0, 20:24], [c, c, a2, a2])
  np.testing.assert_array_equal(scopes[:, 8:20], np.full((2, 12), 2))
  assert (scopes[1, :8] == 0).all() and (scopes[1, 20:] == 0).all()


@pytest.mark.parametrize("mutate,field,problem", [
    (lambda d: d["sdp"][0]["Arg2"].update(Span=[4, 9]), "sdp[0].Arg2.Span", "outside"),
    (lambda d: d["sdp"][1]["Arg2"].update(Sent=7), "sdp[1].Arg2.Sent", "sentence 7"),
    (lambda d: d["sdp"][0].update(Sense="Cause"), "sdp[0].Sense", "unknown sense"),
    (lambda d: d["summary_parse"]["sentences"][1]["srl"]["verbs"][0]["tags"].__setitem__(
        0, "B-AGENT"), "summary_parse.sentences[1].srl.verbs[0].tags", "not in the label"),
    (lambda d: d["coref_clusters"][1]["mentions"].append({"start": 20, "end": 22}),
     "coref_clusters[1].mentions[2]", "outside"),
])
def test_bad_annotations_name_file_line_document_and_field(mutate, field, problem):
  d = _annotated()
  mutate(d)
  with pytest.raises(annotations.AnnotationError) as e:
    annotations.parse_document(d, source="ann.jsonl", line=3)
  msg = str(e.value)
  assert msg.startswith("ann.jsonl:3: document 'doc-1'") and repr(field) in msg and problem in msg


def test_a_view_without_its_annotation_is_an_error():
  d = _annotated()
  del d["coref_clusters"]
  with pytest.raises(annotations.AnnotationError, match="'coref_clusters'.*needs this annotation"):
    views.document_views(annotations.parse_document(d, source="a", line=1), "coref")
