"""jaxpr_io: save, ship and reload traced JAX programs.

    prog = jaxpr_io.trace(fn, *args, **kwargs)
    jaxpr_io.save("model.jaxpr", prog)
    prog = jaxpr_io.load("model.jaxpr")
    prog(*args, **kwargs)          # works under jit, grad, vmap, jvp, ...

The file format is specified by schema/jaxpr.proto.
"""

from jaxpr_io.errors import FormatError, JaxprIoError, UnsupportedError
# Modules that register codecs for JAX's non-data params on import.
from jaxpr_io.families import callbacks  # noqa: F401
from jaxpr_io.families import checkify as _checks  # noqa: F401
from jaxpr_io.families.pallas import core as _pallas  # noqa: F401
from jaxpr_io.families.pallas import sparsecore as _pallas_sparsecore  # noqa: F401
from jaxpr_io.families.custom_rules import registrations as _custom_rules  # noqa: F401
from jaxpr_io.families.custom_rules import lin as _custom_lin  # noqa: F401
from jaxpr_io.families.libraries import codecs as _library_codecs  # noqa: F401
from jaxpr_io.families.custom_rules import vmap as _custom_vmap  # noqa: F401
from jaxpr_io.families.custom_rules import partitioning as _custom_partitioning  # noqa: F401
from jaxpr_io.families import thunky as _thunky  # noqa: F401
from jaxpr_io.families import remat as _remat  # noqa: F401
from jaxpr_io.families import thunks as _jaxpr_thunks  # noqa: F401
from jaxpr_io.families import sharding as _sharding  # noqa: F401
from jaxpr_io.families import sparse as _sparse  # noqa: F401
from jaxpr_io.families.callbacks import register_callback
from jaxpr_io.families.custom_rules.partitioning import register_custom_partitioning
from jaxpr_io.families.hijax.prims import register_hi_primitive
from jaxpr_io.families.pallas.fuser import register_fusion_dtype
from jaxpr_io.api.program import Program, dumps, load, loads, save, trace
from jaxpr_io.safety.trust import DroppedParamWarning, register_ffi_target
from jaxpr_io.codec.registry import (register_effect_codec, register_enum,
                               register_eqn_param_codec,
                               register_named_tuple, register_param_codec,
                               register_primitive)
from jaxpr_io.format.version import FORMAT_VERSION, __version__

__all__ = [
    "DroppedParamWarning", "FORMAT_VERSION", "FormatError", "JaxprIoError",
    "Program",
    "UnsupportedError", "__version__", "dumps", "load", "loads",
    "register_callback", "register_custom_partitioning",
    "register_effect_codec",
    "register_enum", "register_ffi_target", "register_fusion_dtype", "register_eqn_param_codec",
    "register_hi_primitive", "register_named_tuple",
    "register_param_codec",
    "register_primitive", "save", "trace",
]
