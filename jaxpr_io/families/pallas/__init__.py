"""Pallas kernels: records, the fuser's dtypes, kernels over meshes."""
