"""The optical fabric: the registry of port architectures (architectures.py) with their
reference models (model.py) and realisations (mechanisms.py), the byte layout of the
optswitch BPF maps (layout.py), map I/O (maps.py), the fabric of an emulation
(fabric.py), route computation (minimum hop count, equal-cost sets), and the
independent simulator of the paper's switch (eventsim.py, oracle.py).

See docs/optical-switch.md and ebpf/optswitch.bpf.c, ebpf/arch/.
"""
