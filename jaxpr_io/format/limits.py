"""The resource limits of reading and writing, in one place: the modules
that enforce them import these, and the trust model's table
(`jaxpr_io.safety.trust.policy_table`, docs/trust-model.md) quotes them."""

# Sub-jaxprs nest at most this deep, in files written and read. JAX prints,
# lowers and differentiates recursively: at 40 levels of nested scans every
# operation still works on both ends of the supported releases, at 48 lowering
# runs out of Python stack. 32 leaves room for the caller's own nesting
# (tests/hostile/test_limits.py checks each kind of nesting at this depth).
MAX_JAXPR_DEPTH = 32

# Records and tuples in param values nest; deeper values are refused on both
# sides. Each level is two protobuf messages and protobuf parses at most 100
# levels, so the writer must not produce what no reader can parse.
MAX_VALUE_DEPTH = 32

# Protobuf parsers refuse messages nested more than 100 deep. A pytree node
# at depth d is a message at depth d + 2 (under `Program`), its dict keys,
# child keys and auxdata a few levels deeper, two per nested tuple: the
# writer keeps both within these limits, so whatever it writes parses.
MAX_TREE_DEPTH = 64
MAX_KEY_NESTING = 8

# Resource limits of an untrusted load: building the program may take at most
# MEMORY_FACTOR times the file's size plus FIXED_OVERHEAD bytes. The reader
# charges, before it builds them, what the objects of each table and jaxpr
# cost in Python (measured on jax 0.10 and 0.12, CPython 3.11-3.12; a real
# program costs about 16x its file size, a file of tiny equations 60x).
MEMORY_FACTOR = 16
FIXED_OVERHEAD = 64 << 20

# What the cost model (jaxpr_io/safety/costs.py) charges for each pytree
# node of a tree the file describes, counted at every use of a shared node:
# JAX's `PyTreeDef` holds one C++ node for each node of the expanded tree
# (56-82 bytes a node on jax 0.10.2), unflattening it makes an object for
# each (about 30 bytes a node), and the skeleton it is built from, flattening
# and key paths visit each. Building a treedef value of 262,150 shared-node
# expansions grew the resident memory by 74 MiB, 295 bytes a node (fuzz
# campaign seed 102, case 232; 200 was charged before).
TREE_NODE_COST = 320
# What the reader may spend on one polyfill jaxpr (jaxpr_io/compat/polyfills.py):
# a few equations and variables traced for a primitive this JAX lacks, once
# per distinct (primitive, params, input types); charged before it is traced.
POLYFILL_BUILD_COST = 8 << 10

# JAX decides `max` and `min` of symbolic dimensions (and comparisons of
# them) by combining the scope's constraints with the implicit ones of every
# `max`, `min`, `floordiv` and `mod` in the expression: work exponential in
# them, which no syntactic bound captures well (a 113-byte dimension runs for
# minutes). A load of an untrusted file lets that procedure take at most
# this many steps in all (its recursions, term combinations and constraints
# added; jaxpr_io/compat/symbolic.py counts them): about 40,000 a second on a
# 2-core machine. The programs of JAX's shape-polymorphism suite take at
# most a few dozen a dimension.
DECISION_STEPS = 100_000

# jnp.einsum's hi primitive (JAX 0.11+) searches for a contraction order
# with opt_einsum when it is lowered, by the strategy its `optimize` param
# names (`True` is "optimal"). Some strategies take time exponential (or
# factorial) in the number of operands; an untrusted file may ask for each
# at most at the number of operands at which opt_einsum's own "auto" and
# "auto-hq" use it (opt_einsum/paths.py, `_AUTO_CHOICES` and
# `_AUTO_HQ_CHOICES`), where it runs in milliseconds. The other strategies
# (greedy, branch-1, auto, auto-hq, an explicit path) are polynomial.
EINSUM_SEARCH_OPERANDS = {"optimal": 5, "branch-all": 6, "branch-2": 8,
                          "dp": 16, "dynamic-programming": 16}

# `check=True` walks a program with every use of a shared sub-jaxpr inlined:
# JAX's type checker and its printer's sharing analysis re-walk a sub-jaxpr
# at each use, and XLA inlines calls before compiling. What it walks is
# counted in equations plus their inputs and outputs (XLA's compile time
# grows faster than linearly in the operands of inlined calls: 9 levels of
# a call with 200 operands, each calling the one below twice, took 225 s).
# An untrusted file may expand to at most CHECKED_SIZE_FIXED +
# CHECKED_SIZE_PER_STORED x what it stores; a trusted one to
# MAX_CHECKED_SIZE. At these limits check=True took 3-7 s on a 2-core
# machine for the worst small files tried, 33 s for a 527 KB one
# (docs/trust-model.md#cost-model). Real programs expand 1-4x.
CHECKED_SIZE_FIXED = 40_000
CHECKED_SIZE_PER_STORED = 8
MAX_CHECKED_SIZE = 6_000_000

# One call of a `debug_print` equation of an untrusted file prints at most
# this many characters, by the bound of jaxpr_io/safety/printing.py
# (computed from its format string, numpy print options and operand avals):
# 16 Mi characters take numpy about a second to format.
MAX_PRINTED_CHARACTERS = 1 << 24

# The pytree of the arguments a format string is checked against (a
# `debug_print`'s, a failed `checkify.check`'s payload) is unflattened, and
# checkify's error tree composed from its payload trees: each a copy of
# every node, beyond the one the tree's charge covers. Real programs format
# a handful of arguments.
MAX_FORMAT_ARGUMENT_NODES = 1 << 16

# ONNX's and LiteRT's converters copy each call and loop body once per
# equation that holds it (jaxpr_io/converters/expansion.py): an untrusted
# program may expand to CONVERSION_COPY_FACTOR x the equations it stores +
# CONVERSION_FIXED_EQUATIONS. A layer function shared by up to about 60
# layers of an unrolled model converts; a chain of calls doubling at each
# level stops after a few levels (jax2onnx took 100 s for 2**10 copies of a
# 6-equation loop nest). A few thousand equations convert in seconds.
CONVERSION_COPY_FACTOR = 64
CONVERSION_FIXED_EQUATIONS = 2048
