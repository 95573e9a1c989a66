/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * sch_hostnic: the interface shared by the kernel module (kernel/sch_hostnic.c) and
 * user space (testbed/optical/hostnic.py packs and parses these structs with the same
 * layouts). Both structs are naturally aligned fixed-size members (no padding); a
 * change of either layout bumps HOSTNIC_VERSION (the module refuses other versions).
 *
 *  - struct tc_hostnic_qopt     the TCA_OPTIONS payload (optional: without it the
 *                               qdisc takes HOSTNIC_LIMIT_DEFAULT, so a plain
 *                               `tc qdisc add dev X root hostnic` works)
 *  - struct tc_hostnic_xstats   TCA_STATS_APP of the qdisc dump
 */
#ifndef HOSTNIC_H
#define HOSTNIC_H

#include <linux/types.h>

#define HOSTNIC_VERSION		1
#define HOSTNIC_LIMIT_DEFAULT	1000000U	/* packets held (as the fabric's fq) */
#define HOSTNIC_LIMIT_MAX	10000000U
/* a stamp further ahead than this is capped to it (as the fabric's fq, horizon_cap) */
#define HOSTNIC_HORIZON_NS	3600000000000ULL

struct tc_hostnic_qopt {
	__u32 version;		/* HOSTNIC_VERSION */
	__u32 limit;		/* packets held, 1..HOSTNIC_LIMIT_MAX */
};

struct tc_hostnic_xstats {
	__u64 orphaned;		/* packets that belonged to a socket, orphaned at enqueue */
	__u64 out_of_order;	/* packets stamped earlier than the tail (inserted in stamp order) */
	__u64 drops;		/* packets refused at enqueue (limit reached) */
	__u64 max_qlen;		/* the most packets held at once */
	__u64 horizon_capped;	/* packets stamped beyond HOSTNIC_HORIZON_NS, released at it */
};

#endif /* HOSTNIC_H */
