"""The container and its messages: framing, checksums, the compiled schema,
dtypes and the grammar of symbolic dimensions. Knows nothing of JAX's
programs beyond dtypes."""
