"""faust-streaming jobs: stateful joins and tables (trace assembly, conversation store).

Empty until the traces issue: the foundation's path needs no stateful job yet.
"""
