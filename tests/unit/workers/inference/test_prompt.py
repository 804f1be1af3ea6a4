from schemas.events import Message, Role
from workers.inference.prompt import fit_messages


def words(messages) -> int:
    return sum(len(m.content.split()) for m in messages)


def test_oldest_history_goes_first_and_persona_and_question_stay():
    history = [
        Message(Role.USER, "a " * 10),
        Message(Role.ASSISTANT, "b " * 10),
        Message(Role.USER, "c " * 10),
        Message(Role.ASSISTANT, "d " * 10),
    ]
    messages = [Message(Role.SYSTEM, "be brief"), *history, Message(Role.USER, "the question")]
    kept, dropped = fit_messages(messages, words, budget=15)
    assert dropped == 3
    assert [m.content.split()[0] for m in kept] == ["be", "d", "the"]
    assert fit_messages(messages, words, budget=1000) == (messages, 0)


def test_an_oversized_question_is_left_for_the_engine_to_refuse():
    messages = [Message(Role.USER, "old"), Message(Role.USER, "x " * 50)]
    kept, dropped = fit_messages(messages, words, budget=10)
    assert kept == [messages[-1]] and dropped == 1
