import sys

try:
    from .launch import main  # a server's answer where one runs, else cli.main here

    status = main()
except KeyboardInterrupt:  # Ctrl-C while starting up: one line, as main() says it
    sys.stderr.write("python -m mbridge_overlap: interrupted\n")
    sys.exit(130)

sys.exit(status)
