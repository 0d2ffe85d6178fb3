"""Catalog arrays, generators, loaders and the hashing embedder."""
