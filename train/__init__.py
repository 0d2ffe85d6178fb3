"""Training utilities over the array core."""
