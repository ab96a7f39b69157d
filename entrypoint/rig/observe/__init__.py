"""Seeing what the box does: training telemetry, the loader-vs-step bench, and the doctor
(gathering the facts, then pure checks on them)."""
