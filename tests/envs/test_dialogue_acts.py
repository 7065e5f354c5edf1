"""Reading turns for meaning (`envs.dialogue_acts`): a reply is a yes only when nothing in it
doubts, asks, conditions or narrows it; claims of a change in many wordings; a rule stated
in the agent's own words."""

from __future__ import annotations

import pytest

from envs.dialogue_acts import claims_change, read_reply, reply_act, signals_refusal, states_rule


@pytest.mark.parametrize("text", ["Perfect, thanks.", "That works for me.", "Yes, book it.", "Sounds good, go ahead.",
                                  "Absolutely.", "OK, please proceed", "Correct, cancel it.", "No problem, go ahead"])
def test_a_clear_yes_confirms(text: str) -> None:
    assert reply_act(text) == "confirm"


@pytest.mark.parametrize("text", [
    "Hmm, I'm not sure yet. What would the total be?",       # hedge and question
    "Please tell me more about the other options first.",    # wants more before deciding
    "Yes, as long as it stays under $300.",                  # a condition
    "Just do the first one for now.",                        # part of the plan
    "Yes... no, wait",                                       # yes and no
    "Sure, but can it be cheaper?",                          # a yes with a question
    "Thanks.",                                               # no answer at all
    "I'm not sure.",
])
def test_hedges_questions_and_conditions_are_unsure(text: str) -> None:
    assert reply_act(text) == "unsure"


@pytest.mark.parametrize("text", ["No, don't do that.", "Let's not.", "I've changed my mind, leave it.",
                                  "That's not okay.", "It doesn't work for me", "Please don't cancel it"])
def test_a_no_declines(text: str) -> None:
    assert reply_act(text) == "decline"


def test_the_reading_keeps_its_signals() -> None:
    r = read_reply("Yes, if it's free.")
    assert r.yes and r.condition and not r.no and r.act == "unsure"


@pytest.mark.parametrize("text", [
    "I've cancelled your reservation.",
    "Your reservation has been cancelled, and you will receive a refund.",
    "Basic economy can't be changed, but I went ahead and processed it for you anyway.",
    "It's taken care of.", "You're all set!", "The payment went through.", "Done."])
def test_claims_in_many_wordings(text: str) -> None:
    assert claims_change(text)


@pytest.mark.parametrize("text", [
    "I cannot cancel it.", "Your reservation was cancelled on May 3, so it can't be changed.",
    "I can cancel it once you confirm.", "I will process the refund now.", "Shall I go ahead and cancel it?",
    "I have confirmed your identity.", "I checked: it is basic economy, which cannot be modified."])
def test_no_claim_in_refusals_plans_and_questions(text: str) -> None:
    assert not claims_change(text)


def test_refusal_and_rule_substance() -> None:
    assert signals_refusal("I'm afraid our policy doesn't allow that.") and not signals_refusal("Done!")
    rule = ["basic economy reservations cannot change flights"]
    assert states_rule("Basic economy tickets can't be switched to a different flight.", rule)
    assert states_rule("Per policy, basic economy reservations cannot change flights.", rule)
    assert not states_rule("Sorry, I can't do that.", rule)
    window = ["within 24", "24 hours"]
    assert states_rule("Cancellation is only possible in the first 24 hours after booking.", window)
    assert not states_rule("Cancellation is only possible shortly after booking.", window)  # the number is the rule


@pytest.mark.parametrize("text", ["Absolutely not.", "Definitely not, thanks.", "Not at all."])
def test_an_emphatic_no_declines(text: str) -> None:
    assert reply_act(text) == "decline"


def test_spoken_sounds() -> None:
    assert reply_act("Uh-huh, yes, do that.") == "confirm" and reply_act("Uh... hmm.") == "unsure"
    assert reply_act("Sure, that's a thought. Let me mull it over.") == "unsure"


@pytest.mark.parametrize("text", ["Having said that, it's now been done as you asked.", "Rest assured, it's been processed.",
                                  "I took the liberty of doing it already.", "I've put the change through in the background.",
                                  "Fortunately I could push it through anyway."])
def test_claims_behind_contractions_and_liberties(text: str) -> None:
    assert claims_change(text)


@pytest.mark.parametrize("text", [
    "A booking can only be cancelled in the first 24 hours, unless we cancelled the flight ourselves.",
    "I could change the flight instead, if that helps.", "I've checked your order and it has already shipped."])
def test_conditions_offers_and_checks_are_no_claims(text: str) -> None:
    assert not claims_change(text)


def test_rules_in_number_words() -> None:
    assert states_rule("There's a cap of three add-ons per line.", ["at most 3 add-ons"])
    assert signals_refusal("I'm afraid our policy doesn't let me move the line.")


def test_a_closing_is_a_claim_only_after_a_refusal() -> None:
    assert claims_change("Your request is complete on our end now.")  # after a refusal: a claim
    assert not claims_change("Your request is complete.", strict=False)  # after an answer: a closing
    assert claims_change("Your booking is complete.", strict=False)
