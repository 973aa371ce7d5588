"""What an untrusted file may choose, and the checks of its values."""
