"""What every run carries to be seen: telemetry (step timings, the GPUs' samples) and the Prometheus
metrics a rank publishes. Below `launch`, which attaches them; `observe` reads what they record."""
