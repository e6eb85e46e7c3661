"""JPU-Share: fair GPU sharing for research labs, event-sourced over NATS JetStream."""
