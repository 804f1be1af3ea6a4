"""The safety worker: reads answer windows from `safety.windows`, judges them with the shared
checks (`moderation.screen.OutputCheck`) and publishes verdicts the inference worker acts on.
The checks themselves live in `moderation/`, the library every role that screens shares.
"""
