"""Wrappers that adapt other libraries' envs to rltrainer's env APIs."""
