"""Speech out of the answer: the text cut into segments the TTS worker speaks, as it streams."""
