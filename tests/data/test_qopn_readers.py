"""NewsQA (combined JSON) and NLQuAD (SQuAD v1.1 JSON) readers: fields, dropped questions, and
bad input named by file, record and field."""
import json

import pytest

from poi_jax.data.readers.newsqa import load_newsqa, read_newsqa
from poi_jax.data.readers.nlquad import read_nlquad
from poi_jax.data.records import DataError

TEXT = "The mayor said on Monday that the bridge will reopen in May after repairs."


def _story(questions, text=TEXT, sid="./cnn/stories/abc.story", split="train"):
  return {"storyId": sid, "text": text, "type": split, "questions": questions}


def _write(tmp_path, stories, name="newsqa.json"):
  path = tmp_path / name
  path.write_text(json.dumps({"version": "1", "data": stories}))
  return str(path)


def test_newsqa_fields_answers_and_drops(tmp_path):
  may = (TEXT.index("in May"), TEXT.index("in May") + len("in May"))
  qs = [
      {"q": "When will the bridge reopen?", "consensus": {"s": may[0], "e": may[1]},
       "answers": [{"sourcerAnswers": [{"s": may[0] + 3, "e": may[1]}, {"noAnswer": True}]},
                   {"sourcerAnswers": [{"s": may[0], "e": may[1]}]}],
       "validatedAnswers": [{"s": may[0] + 3, "e": may[1] + 14}]},
      {"q": "Who is the governor?", "consensus": {"noAnswer": True}, "answers": []},
      {"q": "asdf", "consensus": {"badQuestion": True}, "answers": []},
  ]
  path = _write(tmp_path, [_story(qs), _story(qs[:1], sid="dev-story", split="dev")])
  train, counts = load_newsqa(path, "train")
  assert (counts.stories, counts.questions, counts.kept, counts.no_answer,
          counts.bad_question) == (1, 3, 1, 1, 1)
  ex, = train
  assert ex.qid == "./cnn/stories/abc.story#0" and ex.context == TEXT
  assert [a["text"] for a in ex.answers] == ["in May", "May", "May after repairs"]
  assert ex.answers[0]["answer_start"] == may[0]  # the consensus is the training target
  dev = list(read_newsqa(path, "dev"))
  assert [e.title for e in dev] == ["dev-story"]
  assert len(list(read_newsqa(path, ""))) == 2


@pytest.mark.parametrize("story,field,msg", [
    (_story([{"q": "x?", "consensus": {"s": 5, "e": 500}}]), "consensus", "outside the article"),
    (_story([{"q": "x?", "consensus": {"s": 9, "e": 4}}]), "consensus", "outside the article"),
    (_story([{"q": "x?", "consensus": {"s": 1, "e": 4}, "answers": [
        {"sourcerAnswers": [{"s": -1, "e": 3}]}]}]), r"answers\[0\].sourcerAnswers\[0\]",
     "outside"),
    (_story([{"q": "x?", "consensus": {"s": 1, "e": 4}}], text="  \n"), "text", "empty article"),
    (_story([{"q": "", "consensus": {"s": 1, "e": 4}}]), "q", "empty question"),
    (_story([{"q": "x?"}]), "consensus", "missing"),
])
def test_newsqa_bad_input_is_named(tmp_path, story, field, msg):
  path = _write(tmp_path, [story])
  with pytest.raises(DataError, match=rf"newsqa.json: record '[^']*', field '{field}': .*{msg}"):
    load_newsqa(path, "train")


def test_newsqa_not_json(tmp_path):
  path = tmp_path / "broken.json"
  path.write_text("{")
  with pytest.raises(DataError, match="broken.json.*not valid JSON"):
    load_newsqa(str(path))


def _nlquad(tmp_path, context, answers):
  path = tmp_path / "nlquad.json"
  path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": [
      {"context": context, "qas": [{"id": "q1", "question": "Why?", "answers": answers}]}]}]}))
  return str(path)


def test_nlquad_reads_and_checks_answers(tmp_path):
  start = TEXT.index("the bridge")
  ok = list(read_nlquad(_nlquad(tmp_path, TEXT, [{"text": "the bridge", "answer_start": start}])))
  assert ok[0].answers[0]["text"] == "the bridge"
  with pytest.raises(DataError, match=r"nlquad.json: record 'q1', field 'answers.text'"):
    list(read_nlquad(_nlquad(tmp_path, TEXT, [{"text": "the bridge", "answer_start": start + 1}])))
  with pytest.raises(DataError, match=r"record 'q1', field 'answers.answer_start'"):
    list(read_nlquad(_nlquad(tmp_path, TEXT, [{"text": "the bridge", "answer_start": 900}])))
  with pytest.raises(DataError, match=r"record 'q1', field 'context': empty article"):
    list(read_nlquad(_nlquad(tmp_path, "   ", [{"text": " ", "answer_start": 0}])))
