import sys

try:
    from .cli import main
except KeyboardInterrupt:  # Ctrl-C while starting up: one line, as main() says it
    sys.stderr.write("python -m mbridge_overlap: interrupted\n")
    sys.exit(130)

sys.exit(main())
