"""checkify's classes, imported with the checkify family (a program or a
file that holds `check` equations or error effects)."""

from jax._src import checkify as jax_checkify

# checkify's effect: a class of jax._src.checkify in 0.10, of
# jax._src.effects from 0.11 on (re-exported by checkify).
ErrorEffect = jax_checkify.ErrorEffect
