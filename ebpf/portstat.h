/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * portstat: per-(node, port, direction) packet and byte counters.
 *
 * Shared between the BPF program (portstat.bpf.c, which includes vmlinux.h
 * first) and Python (testbed/bpf.py mirrors the layout; tests/unit/test_btf_layout.py
 * checks it against the object's BTF). No implicit padding.
 */
#ifndef OTT_PORTSTAT_H
#define OTT_PORTSTAT_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Values of the `tb_direction` rodata variable and of portstat_key.dir. */
#define PORTSTAT_DIR_INGRESS 0
#define PORTSTAT_DIR_EGRESS  1

/* Capacity of the port_counters hash map (one entry per node/port/dir). */
#define PORTSTAT_MAX_ENTRIES 16384

struct portstat_key {
	__u32 node;  /* switch/host node id of the run (not an ifindex) */
	__u16 port;  /* port id within the node */
	__u8 dir;    /* PORTSTAT_DIR_INGRESS or PORTSTAT_DIR_EGRESS */
	__u8 pad;    /* always 0 */
};

struct portstat_value {
	__u64 packets;   /* wire packets: a GSO skb counts gso_segs */
	__u64 bytes;     /* sum of skb->len, L2 header included */
	__u64 first_ns;  /* bpf_ktime_get_ns() (CLOCK_MONOTONIC) of the first skb */
	__u64 last_ns;   /* bpf_ktime_get_ns() of a most recent skb */
};

#endif /* OTT_PORTSTAT_H */
