"""Long articles for the QOPN tests, built from the shipped SQuAD 2.0 sample: the paragraphs of
each Wikipedia article joined (blank line between them) into one article, answerable questions only,
answer offsets shifted by the paragraph's position. Written in NewsQA's combined JSON format and
in NLQuAD's (SQuAD v1.1) format."""
import json

from poi_jax.data.json_stream import load_json


def long_articles(squad_path, *, paragraphs_per_article=None, articles=None):
  """``[(title, text, [(question, [(start, end), ...]), ...])]``; ``paragraphs_per_article``
  splits each Wikipedia article into consecutive chunks of that many paragraphs (None: all)."""
  data = load_json(str(squad_path))["data"]
  out = []
  for a in data[slice(*articles) if articles else slice(None)]:
    paras = a["paragraphs"]
    step = paragraphs_per_article or len(paras)
    for c in range(0, len(paras), step):
      text, qas = "", []
      for p in paras[c:c + step]:
        shift = len(text) + (2 if text else 0)
        text = text + ("\n\n" if text else "") + p["context"]
        for qa in p["qas"]:
          if qa.get("is_impossible") or not qa["answers"]:
            continue
          spans = []
          for ans in qa["answers"]:
            sp = (ans["answer_start"] + shift, ans["answer_start"] + shift + len(ans["text"]))
            if sp not in spans:
              spans.append(sp)
          qas.append((qa["question"], spans, qa["id"]))
      out.append((f"{a['title']}-{c}", text, qas))
  return out


def write_newsqa(path, articles, split="train"):
  data = []
  for title, text, qas in articles:
    data.append({"storyId": title, "text": text, "type": split, "questions": [
        {"q": q, "consensus": {"s": spans[0][0], "e": spans[0][1]}, "isAnswerAbsent": 0,
         "isQuestionBad": 0,
         "answers": [{"sourcerAnswers": [{"s": s, "e": e} for s, e in spans]}],
         "validatedAnswers": []} for q, spans, _ in qas]})
  with open(path, "w") as f:
    json.dump({"version": "1", "data": data}, f)
  return path


def write_nlquad(path, articles):
  data = [{"title": title, "paragraphs": [{"context": text, "qas": [
      {"id": qid, "question": q,
       "answers": [{"text": text[s:e], "answer_start": s} for s, e in spans]}
      for q, spans, qid in qas]}]} for title, text, qas in articles]
  with open(path, "w") as f:
    json.dump({"version": "1.1", "data": data}, f)
  return path
