"""The voice loop: the speech detector on the client's audio, answering on a guess, barge-in,
and the audio timeline that keeps the history truthful."""
