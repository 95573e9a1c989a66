"""Congestion control: the papers' TCP variants as kernel modules + per-host profiles.

* :mod:`testbed.cc.modules`   list / load / unload / set-default of CC modules
* :mod:`testbed.cc.profiles`  named profiles (saw, sawl, sack, msack, reno, cubic,
  bbr, paced-reno) applied to one emulated host, with their paper-vs-kernel notes
* :mod:`testbed.cc.sockops`   per-host initial RTO through a sock_ops program
* :mod:`testbed.cc.selection` the ``[cca]`` table of experiment definitions
* :mod:`testbed.cc.trace`     live cwnd / RTO / in-flight tracing (CO-RE BPF, tcp_probe)
"""
