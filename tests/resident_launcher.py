"""Run ``bkmcp --resident`` (or any bkmcp command) as its own process, from the source tree or a built pyz,
with the test stand-in registry (tests/resident_standin.py) when bkmcp has no registry of its own yet.

    python tests/resident_launcher.py [--pyz=dist/bkmcp.pyz] --resident --registry FILE ...
"""

import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main() -> None:
    args = sys.argv[1:]
    pyz = None
    if args and args[0].startswith("--pyz="):
        pyz = args.pop(0)[len("--pyz="):]
    sys.path.insert(0, HERE)
    import resident_standin

    if pyz is None:
        sys.path.insert(0, ROOT)
        import bkmcp

        resident_standin.install(bkmcp)
        sys.exit(bkmcp.main(args))
    sys.path.insert(0, pyz)
    import bkmcp  # from inside the zip; its __main__ below finds this same module

    resident_standin.install(bkmcp)
    sys.argv = [pyz, *args]
    runpy.run_path(pyz, run_name="__main__")


main()
