"""A stand-in for verify in tests/test_holder.py: the Bridge holder's mechanics without Bridge. It asks the holder
as verify does, and where none answers runs here, starting one at its "import" (here: nothing to import), as
verify does in every run (a held one must start none).

    HOLDER_DEMO_SKILL=<skill folder> python holder_demo.py [exit=N] [sleep=S] [...]
"""

import os
import sys
import time

sys.path.insert(0, os.environ["HOLDER_DEMO_SKILL"])
from mbridge_overlap.bridge import holder  # noqa: E402


def run(argv: list) -> int:
    holder.start(run, end, keep=set())  # where verify starts it: right after its import, in every run
    umask = os.umask(0)
    os.umask(umask)
    print(f"argv={argv} cwd={os.getcwd()} umask={umask:o} MBRIDGE_SRC={os.environ.get('MBRIDGE_SRC')} "
          f"stdin={sys.stdin.readline().strip()!r} tty={sys.stdout.isatty()}")
    print("served" if holder.served_by else "own", file=sys.stderr, flush=True)
    code = 0
    for arg in argv:
        name, _, value = arg.partition("=")
        if name == "sleep":
            print("sleeping", file=sys.stderr, flush=True)
            time.sleep(float(value))
        elif name == "exit":
            code = int(value)
    return code


def end(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    served = holder.answer(sys.argv[1:])
    end(run(sys.argv[1:]) if served is None else served)
