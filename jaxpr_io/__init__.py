"""jaxpr_io: save, ship and reload traced JAX programs.

    prog = jaxpr_io.trace(fn, *args, **kwargs)
    jaxpr_io.save("model.jaxpr", prog)
    prog = jaxpr_io.load("model.jaxpr")
    prog(*args, **kwargs)          # works under jit, grad, vmap, jvp, ...

The file format is specified by schema/jaxpr.proto.
"""

from jaxpr_io.errors import FormatError, JaxprIoError, UnsupportedError
from jaxpr_io.families.callbacks import register_callback
from jaxpr_io.families.custom_rules.partitioning import register_custom_partitioning
from jaxpr_io.families.hijax.prims import register_hi_primitive
from jaxpr_io.families.pallas.fuser import register_fusion_dtype
from jaxpr_io.api.program import Program, dumps, load, loads, save, trace
from jaxpr_io.safety.trust import DroppedParamWarning, register_ffi_target
from jaxpr_io.compat.polyfills import PolyfillWarning
from jaxpr_io.codec.registry import (equation_in_avals,
                                     register_effect_codec, register_enum,
                               register_eqn_param_codec,
                               register_named_tuple, register_param_codec,
                               register_primitive)
from jaxpr_io.format.version import FORMAT_VERSION, __version__

__all__ = [
    "DroppedParamWarning", "FORMAT_VERSION", "FormatError", "JaxprIoError",
    "equation_in_avals",
    "PolyfillWarning", "Program",
    "UnsupportedError", "__version__", "dumps", "load", "loads",
    "register_callback", "register_custom_partitioning",
    "register_effect_codec",
    "register_enum", "register_ffi_target", "register_fusion_dtype", "register_eqn_param_codec",
    "register_hi_primitive", "register_named_tuple",
    "register_param_codec",
    "register_primitive", "save", "trace",
]
