"""custom_jvp, custom_vjp, custom_lin, custom_vmap and custom_partitioning:
user rules stored as jaxprs or by registered name."""
