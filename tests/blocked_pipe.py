"""A pipe whose buffer is already full: a command writing its output into it blocks until it is read or killed."""

import os


def full_pipe() -> tuple[int, int]:
    """(read end, write end), the write end blocking and full."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    try:
        while True:
            os.write(write_end, b"x" * 4096)
    except BlockingIOError:
        pass
    os.set_blocking(write_end, True)
    return read_end, write_end
