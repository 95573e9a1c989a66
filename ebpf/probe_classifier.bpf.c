// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* Minimal tc classifier for `testbed doctor`'s clsact+BPF probe (testbed/features.py).
 * Prebuilt by `make -C ebpf`, so the probe needs no clang run (clang's cold start took
 * over 20 s in a loaded software-emulated guest). */
__attribute__((section("classifier"), used)) int ot_probe(void *skb) { return 0; }
char _license[] __attribute__((section("license"), used)) = "GPL";
