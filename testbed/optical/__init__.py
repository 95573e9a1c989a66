"""Optical switch models: the Python reference (oracle) of the eBPF port model, the
byte layout of its BPF maps, and route computation (minimum hop count, equal-cost sets).

See docs/optical-switch.md and ebpf/optswitch.bpf.c.
"""
