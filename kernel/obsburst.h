/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * sch_obsburst: the interface shared by the kernel module (kernel/sch_obsburst.c) and
 * user space (testbed/optical/obsburst.py packs and parses these structs with the
 * same layouts; docs/obs.md describes them).
 *
 *  - struct tc_obsburst_qopt     the TCA_OPTIONS payload (netlink, host byte order)
 *  - struct tc_obsburst_xstats   TCA_STATS_APP of the qdisc dump (host byte order)
 *  - struct obsb_ctrl_hdr        the burst control packet on the wire (big endian),
 *                                EtherType OBSB_ETH_P after an Ethernet header
 *
 * Every struct is made of naturally aligned fixed-size members (no padding); a
 * change of any layout bumps OBSB_VERSION (the module refuses other versions).
 */
#ifndef OBSBURST_H
#define OBSBURST_H

#include <linux/types.h>

#define OBSB_VERSION		1
#define OBSB_MAX_CLASSES	4

/* how a packet's class is chosen: the minor number (low 16 bits) of skb->priority
 * (SO_PRIORITY, or a clsact BPF writing skb->priority), or skb->mark; a value
 * >= nclasses goes to default_class */
#define OBSB_CLASS_BY_PRIORITY	0
#define OBSB_CLASS_BY_MARK	1

/* flags */
#define OBSB_F_CTRL		0x1	/* emit a control packet when a burst closes */

/* bounds (checked by the module, and by testbed/optical/obsburst.py first) */
#define OBSB_TMAX_MAX_NS	3600000000000ULL	/* 1 h */
#define OBSB_OFFSET_MAX_NS	3600000000000ULL	/* 1 h */
#define OBSB_LMAX_MAX		1000000000ULL		/* 1 GB */
#define OBSB_RATE_MIN		1000ULL			/* bit/s */
#define OBSB_RATE_MAX		10000000000000ULL	/* 10 Tbit/s */
#define OBSB_LIMIT_MAX		10000000U		/* packets held */

struct tc_obsburst_class {
	__u64 tmax_ns;		/* burst closes this long after its first packet, 1..1 h */
	__u64 lmax_bytes;	/* ... or when it holds this many bytes, 1..1e9 */
	__u64 offset_ns;	/* a closed burst starts leaving this long after, 0..1 h */
	__u64 rate_bps;		/* optical rate its packets leave at, 1e3..1e13 bit/s */
};

struct tc_obsburst_qopt {
	__u32 version;		/* OBSB_VERSION */
	__u32 nclasses;		/* 1..OBSB_MAX_CLASSES */
	__u32 class_by;		/* OBSB_CLASS_BY_* */
	__u32 default_class;	/* < nclasses */
	__u32 limit;		/* packets held in all (control packets included), 1..1e7 */
	__u32 flags;		/* OBSB_F_* */
	struct tc_obsburst_class cls[OBSB_MAX_CLASSES];	/* first nclasses used */
};

struct tc_obsburst_class_stats {
	__u64 bursts;		/* bursts closed */
	__u64 closed_time;	/* ... of them by Tmax */
	__u64 closed_volume;	/* ... of them by Lmax */
	__u64 packets;		/* data packets released */
	__u64 bytes;		/* data bytes released (qdisc_pkt_len) */
};

struct tc_obsburst_xstats {
	struct tc_obsburst_class_stats cls[OBSB_MAX_CLASSES];
	__u64 ctrl_packets;	/* control packets released */
	__u64 ctrl_failed;	/* control packets that could not be allocated */
	__u64 drops;		/* packets refused at enqueue (limit reached) */
};

/* The burst control packet: an Ethernet frame to the broadcast address, EtherType
 * OBSB_ETH_P (IEEE 802 local experimental EtherType 1), this 48-byte payload, big
 * endian. It leaves at the burst's close, before the burst's first packet. */
#define OBSB_ETH_P		0x88B5
#define OBSB_CTRL_MAGIC		0x4F425342	/* "OBSB" */
#define OBSB_CTRL_F_VOLUME	0x1		/* closed by Lmax (else by Tmax) */

struct obsb_ctrl_hdr {
	__be32 magic;		/* OBSB_CTRL_MAGIC */
	__u8 version;		/* OBSB_VERSION */
	__u8 cls;		/* class, 0..nclasses-1 */
	__be16 flags;		/* OBSB_CTRL_F_* */
	__be64 burst_id;	/* per qdisc, in opening order over all classes, from 1 */
	__be64 bytes;		/* burst length in bytes (sum of qdisc_pkt_len) */
	__be32 packets;		/* burst length in packets */
	__be32 reserved;	/* 0 */
	__be64 offset_ns;	/* first packet leaves this long after this packet */
	__be64 close_ns;	/* close time, CLOCK_MONOTONIC of the emulation, ns */
};

#endif /* OBSBURST_H */
