"""Device kernels with a plain jnp reference beside each."""
