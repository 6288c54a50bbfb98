"""Appendix B.5: what is repaired deterministically and what fails, with its reason class.

A repair is allowed only when exactly one task output can be read: one option letter standing
alone, one decision keyword, neither negated.
"""

import pytest

from apm.prompts.parse import parse_adaptive, parse_mcqa


@pytest.mark.parametrize("text,status,answer,error", [
    # exact
    ('{"answer":"B"}', "ok", "B", None),
    # repaired: one option letter standing alone
    ('```json\n{"answer": "c"}\n```', "repaired", "C", None),
    ("Sure! {'answer': 'D'} hope that helps", "repaired", "D", None),
    ('{"Answer":"A"}', "repaired", "A", None),
    ('{"answer":"(B)."}', "repaired", "B", None),
    ('{"answer": "B. The red cup"}', "repaired", "B", None),
    ('{"answer": "B. A red cup on the table"}', "repaired", "B", None),
    ('{"answer": "Option C: she left it in the car"}', "repaired", "C", None),
    ('{"answer": "B"', "repaired", "B", None),
    ("{1: 'x', 'answer': 'B'}", "repaired", "B", None),
    ("A.", "repaired", "A", None),
    ("b", "repaired", "B", None),
    ("(B)", "repaired", "B", None),
    ("(C)", "repaired", "C", None),
    ("Answer: B", "repaired", "B", None),
    ("Answer: A because the cup is red.", "repaired", "A", None),
    ("The answer is (C).", "repaired", "C", None),
    ("A person picks up the cup, so the answer is D.", "repaired", "D", None),
    ("Final answer: B\n\nExplanation: A person was seen at the sink.", "repaired", "B", None),
    ("I think it's B because the cup is red.", "repaired", "B", None),
    ("E.g. the cup is red, so B", "repaired", "B", None),
    ("The answer is B, not A.", "repaired", "B", None),
    ("Not sure, maybe B", "repaired", "B", None),
    ("The answer is B. " * 60, "repaired", "B", None),
    # several options
    ("A or B", "failed", None, "several_options"),
    ('{"answer":"A, C"}', "failed", None, "several_options"),
    ('{"answer":"A or C"}', "failed", None, "several_options"),
    ('{"answer":"A|B|C|D"}', "failed", None, "several_options"),
    ("C (or D)", "failed", None, "several_options"),
    ('{"answer":"C (or D)"}', "failed", None, "several_options"),
    ("The answer is C (or D).", "failed", None, "several_options"),
    ("Answer: C (or D)", "failed", None, "several_options"),
    ("Option A is wrong and option B is wrong, so C.", "failed", None, "several_options"),
    # negated
    ("The answer is not A.", "failed", None, "negated"),
    ("It isn't C.", "failed", None, "negated"),
    ("Neither A nor B.", "failed", None, "negated"),
    ('{"answer":"not D"}', "failed", None, "negated"),
    ('{"answer":"B or not B"}', "failed", None, "negated"),
    # no option letter
    ("", "failed", None, "empty"),
    ("   \n", "failed", None, "empty"),
    ('{"answer":"a guess"}', "failed", None, "no_answer"),
    ('{"answer":""}', "failed", None, "no_answer"),
    ('{"answer":null}', "failed", None, "no_answer"),
    ('{"reason":"B"}', "failed", None, "no_answer"),
    ("I cannot tell from the video.", "failed", None, "no_answer"),
    ("I cannot tell; the answer is a guess at best.", "failed", None, "no_answer"),
    ("A red cup.", "failed", None, "no_answer"),
    ('{"answer":"A person"}', "failed", None, "no_answer"),
    ("blah " * 200, "failed", None, "repetition"),
    # not an option of the task
    ('{"answer":"Z"}', "failed", None, "invalid_option"),
    ('{"answer":3}', "failed", None, "invalid_option"),
])
def test_mcqa(text, status, answer, error):
    p = parse_mcqa(text)
    assert (p.status, p.answer, p.error) == (status, answer, error)


def test_ea_accepts_option_e_and_mcqa_does_not():
    assert parse_mcqa('{"answer":"E"}', "ABCDE").answer == "E"
    assert parse_mcqa('{"answer":"E"}').error == "invalid_option"
    assert parse_mcqa("E or A", "ABCDE").error == "several_options"


def test_length_cut_without_answer_is_repetition_and_with_one_is_repaired():
    assert parse_mcqa("I think that", finish_reason="length").error == "repetition"
    assert parse_mcqa("Answer: B. Because", finish_reason="length").answer == "B"


@pytest.mark.parametrize("text,needs_answer,status,decision,answer,error", [
    # exact
    ('{"decision":"SILENT","reason":"x"}', False, "ok", "SILENT", None, None),
    ('{"decision":"INTERVENE","answer":"B","reason":"x"}', True, "ok", "INTERVENE", "B", None),
    ('{"decision":"SILENT","reason":"x"}', True, "ok", "SILENT", None, None),
    # repaired: one decision keyword, not negated
    ('{"decision":"intervene","proactive_response":"y","reason":"x"}', False, "repaired", "INTERVENE", None, None),
    ('{"Decision":" SILENT."}', False, "repaired", "SILENT", None, None),
    ("I will stay SILENT for now.", False, "repaired", "SILENT", None, None),
    ("SILENT, not INTERVENE", False, "repaired", "SILENT", None, None),
    ("The user did not ask for anything, so I stay silent.", False, "repaired", "SILENT", None, None),
    ("I'm not sure, but I will INTERVENE.", False, "repaired", "INTERVENE", None, None),
    ("The user is not in danger and I stay SILENT.", False, "repaired", "SILENT", None, None),
    ('{"decision":"SILENT, not INTERVENE"}', False, "repaired", "SILENT", None, None),
    ('```json\n{"decision":"INTERVENE","answer":"(c)"}\n```', True, "repaired", "INTERVENE", "C", None),
    ('{"decision":"INTERVENE","answer":"C. The blue bag"}', True, "repaired", "INTERVENE", "C", None),
    # negated decision
    ("I will not intervene at this point.", False, "failed", None, None, "negated"),
    ("Do not INTERVENE yet.", False, "failed", None, None, "negated"),
    ("I don't think I need to intervene.", False, "failed", None, None, "negated"),
    ("There is no reason to INTERVENE.", False, "failed", None, None, "negated"),
    ('{"decision":"not INTERVENE"}', False, "failed", None, None, "negated"),
    # no decision
    ("SILENT or INTERVENE?", False, "failed", None, None, "no_decision"),
    ('{"decision":"SILENT/INTERVENE"}', False, "failed", None, None, "no_decision"),
    ('{"decision":"MAYBE"}', False, "failed", None, None, "no_decision"),
    ('{"reason":"SILENT"}', False, "failed", None, None, "no_decision"),
    ("No intervention is needed.", False, "failed", None, None, "no_decision"),
    ("", False, "failed", None, None, "empty"),
    # ERA: the answer goes through the MCQA letter rule
    ('{"decision":"INTERVENE","reason":"x"}', True, "failed", "INTERVENE", None, "no_answer"),
    ('{"decision":"INTERVENE","answer":"a guess"}', True, "failed", "INTERVENE", None, "no_answer"),
    ('{"decision":"INTERVENE","answer":"A or C"}', True, "failed", "INTERVENE", None, "several_options"),
    ('{"decision":"INTERVENE","answer":"not B"}', True, "failed", "INTERVENE", None, "negated"),
    ('{"decision":"INTERVENE","answer":"E"}', True, "failed", "INTERVENE", None, "invalid_option"),
    ("I will INTERVENE: the answer is B.", True, "repaired", "INTERVENE", "B", None),
    ('{"decision":"INTERVENE","Answer":"B"}', True, "repaired", "INTERVENE", "B", None),
    ("I will INTERVENE to warn the user.", True, "failed", "INTERVENE", None, "no_answer"),
])
def test_adaptive(text, needs_answer, status, decision, answer, error):
    p = parse_adaptive(text, needs_answer=needs_answer)
    assert (p.status, p.decision, p.answer, p.error) == (status, decision, answer, error)


def test_length_cut_without_decision_is_repetition():
    assert parse_adaptive("the user is the user is", finish_reason="length").error == "repetition"
    assert parse_adaptive("SILENT. The user is the user is", finish_reason="length").decision == "SILENT"
