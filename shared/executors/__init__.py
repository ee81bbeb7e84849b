"""Executors: the worker (chat, tools, answer in one pass) and the memory executor."""
