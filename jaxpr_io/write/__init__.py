"""ClosedJaxpr -> `Program` message."""
