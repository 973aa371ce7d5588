"""`Program` message -> ClosedJaxpr, validated while it is built."""
