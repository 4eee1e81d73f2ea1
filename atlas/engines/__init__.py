"""Inference engines behind one protocol, and preparation of the embedded default model."""
