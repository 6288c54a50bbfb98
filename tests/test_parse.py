"""Appendix B.5: what is repaired deterministically and what fails, with its reason class."""

import pytest

from apm.prompts.parse import parse_adaptive, parse_mcqa


@pytest.mark.parametrize("text,status,answer,error", [
    ('{"answer":"B"}', "ok", "B", None),
    ('```json\n{"answer": "c"}\n```', "repaired", "C", None),
    ("Sure! {'answer': 'D'} hope that helps", "repaired", "D", None),
    ("Answer: B", "repaired", "B", None),
    ("(C)", "repaired", "C", None),
    ('{"Answer":"A"}', "repaired", "A", None),
    ("A or B", "failed", None, "several_options"),
    ('{"answer":"A, C"}', "failed", None, "several_options"),
    ("", "failed", None, "empty"),
    ('{"answer":"Z"}', "failed", None, "invalid_option"),
    ("I cannot tell from the video.", "failed", None, "no_answer"),
    ("I cannot tell; the answer is a guess at best.", "failed", None, "no_answer"),
    ("The answer is (C).", "repaired", "C", None),
    ("blah " * 200, "failed", None, "repetition"),
])
def test_mcqa(text, status, answer, error):
    p = parse_mcqa(text)
    assert (p.status, p.answer, p.error) == (status, answer, error)


def test_ea_accepts_option_e_and_mcqa_does_not():
    assert parse_mcqa('{"answer":"E"}', "ABCDE").answer == "E"
    assert parse_mcqa('{"answer":"E"}').error == "invalid_option"


@pytest.mark.parametrize("text,needs_answer,status,decision,answer,error", [
    ('{"decision":"SILENT","reason":"x"}', False, "ok", "SILENT", None, None),
    ('{"decision":"intervene","proactive_response":"y","reason":"x"}', False, "repaired", "INTERVENE", None, None),
    ('{"decision":"INTERVENE","answer":"B","reason":"x"}', True, "ok", "INTERVENE", "B", None),
    ('{"decision":"INTERVENE","reason":"x"}', True, "failed", "INTERVENE", None, "no_answer"),
    ('{"decision":"SILENT","reason":"x"}', True, "ok", "SILENT", None, None),
    ("I will stay SILENT for now.", False, "repaired", "SILENT", None, None),
    ("SILENT or INTERVENE?", False, "failed", None, None, "no_decision"),
    ('{"decision":"MAYBE"}', False, "failed", None, None, "no_decision"),
    ("", False, "failed", None, None, "empty"),
])
def test_adaptive(text, needs_answer, status, decision, answer, error):
    p = parse_adaptive(text, needs_answer=needs_answer)
    assert (p.status, p.decision, p.answer, p.error) == (status, decision, answer, error)


def test_length_cut_without_decision_is_repetition():
    assert parse_adaptive("the user is the user is", finish_reason="length").error == "repetition"
