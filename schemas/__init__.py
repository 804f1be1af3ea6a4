"""The shared vocabulary of turnstream: events, codec, topics, Redis names, settings.

Pure: imports nothing from the services. `ws_edge`, `workers` and `stream_jobs` meet here.
"""
