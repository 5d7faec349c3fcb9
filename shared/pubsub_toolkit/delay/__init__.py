"""Delayed delivery: Cloud Tasks scheduling (ingress side) and the release logic (relay side).

A due-later message becomes a Cloud Tasks task whose name derives from its dedup key; at the due
time Cloud Tasks calls the relay, which republishes the message to the final topic.
"""
