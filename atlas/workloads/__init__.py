"""Workloads: what requests a load point sends (docs/workloads.md)."""
