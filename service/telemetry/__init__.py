"""What the service tells about itself: metrics, logs, traces and payload logs."""
