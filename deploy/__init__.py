"""Deployment helpers: the native stack (deploy/stack.py)."""
