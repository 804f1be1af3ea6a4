"""Dead letters: list them, read one, and re-drive them to the topic they came from once
their cause is fixed, each at most once (`python -m producers.deadletters`)."""
