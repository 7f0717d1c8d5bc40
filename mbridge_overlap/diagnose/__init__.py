"""Reading crashed, hung or slow training logs: the catalog of messages and its line matcher (messages.py)."""
