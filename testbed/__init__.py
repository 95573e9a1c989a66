"""optical-tcp-testbed: real Linux TCP stacks over emulated optical switches."""

__version__ = "0.1.0"
