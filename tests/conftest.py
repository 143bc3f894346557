"""Suite-wide settings."""

import signal


def pytest_configure(config):
    # A suite started as a background job of a non-interactive shell (`bash script.sh &`, a CI
    # runner's step) inherits SIGINT ignored, and every process it starts would too: Python leaves
    # an ignored SIGINT ignored, so the tests that press Ctrl-C on a `privbandit` process would see
    # it ignored and fail. With Python's own handler here, the processes the tests start get the
    # default disposition across exec, as from a terminal.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
