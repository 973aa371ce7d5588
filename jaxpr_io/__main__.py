"""`python -m jaxpr_io dump ...` and `python -m jaxpr_io load ...`."""

import sys

from jaxpr_io.tools import dump, load

_COMMANDS = {"dump": dump.main, "load": load.main}


def main() -> int:
  if len(sys.argv) < 2 or sys.argv[1] not in _COMMANDS:
    print("usage: python -m jaxpr_io {dump,load} ... (see --help of each)",
          file=sys.stderr)
    return 2
  return _COMMANDS[sys.argv[1]](sys.argv[2:])


if __name__ == "__main__":
  sys.exit(main())
