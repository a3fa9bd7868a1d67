"""Secrets: scopes and secrets (`routes`, kept by `backend`)."""
