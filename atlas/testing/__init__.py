"""Test doubles that speak real HTTP: a mock OpenAI-compatible streaming server and an engine around it."""
