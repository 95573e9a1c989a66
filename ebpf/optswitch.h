/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * optswitch: the optical switch port model (one port architecture per node: ebpf/arch/,
 * testbed/optical/architectures.py) and the host NIC serialiser: the structs, maps and
 * constants of the BPF program (optswitch.bpf.c, which includes vmlinux.h first). The
 * loader (tbload.c) includes no program's header: it moves keys and values as bytes.
 * Python packs and parses them itself (testbed/optical/layout.py, with the `struct`
 * module: no implicit padding here), and tests/unit/test_btf_layout.py checks every
 * such layout against the built object's BTF, member by member.
 *
 * Model: Minakhmetov, Ware, Iannone, "Hybrid and all-optical packet switching in a
 * datacenter network with TCP" (sections II and IV); docs/optical-switch.md.
 *
 * All times are CLOCK_MONOTONIC nanoseconds of the emulation (already dilated).
 * Every map is keyed by the node id of the run (a dense index 0..OPTSW_MAX_NODES-1
 * given by the testbed, never an ifindex) and, inside a node, by the port id.
 */
#ifndef OTT_OPTSWITCH_H
#define OTT_OPTSWITCH_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define OPTSW_MAX_NODES   512  /* nodes (switches and hosts) of one run */
#define OPTSW_MAX_PORTS   64   /* ports (azimuths n_a) of one node (a power of two: indices
				* are bounded with & (OPTSW_MAX_PORTS - 1)) */
#define OPTSW_MAX_NE      32   /* buffer input / output ports n_e of one switch */
#define OPTSW_MAX_ECMP    16   /* equal-cost next hops of one route */
#define OPTSW_OCC_SLOTS   1024 /* buffered packets waiting at once in a node that the occupancy
				* (waiting(), occupy()) tracks exactly (a power of two) */
#define OPTSW_BOUT_RES    16   /* future emissions tracked per buffer output (a power of two) */
/* fidelity-monitor histogram buckets (log-linear; the largest index, for 2^64 ns, is 495).
 * A power of two so the index is bounded with a mask: the 6.1 verifier loses a
 * compare-and-clamp bound when clang compares a zero-extended copy of the index. */
#define OPTSW_LATE_BUCKETS 512
#define OPTSW_ROUTES_MAX  65536
#define OPTSW_OBS_RING    16   /* announced bursts queued per input port (a power of two) */
/* holding-delay histogram: log-linear, 16 buckets per power of two (exact below 16 ns;
 * a bucket is 1/16 of its octave wide, <= 6.25 % of its lower bound); the last bucket
 * takes every delay from 31 x 2^30 ns (33.3 s) on (also counted in `over`). */
#define OPTSW_HOLD_SUB    16
#define OPTSW_HOLD_BUCKETS 512

/* cfg_node.arch: the port architecture of a node. Its code, its decision function
 * (ebpf/arch/<name>.h) and its configuration are entries of the registry
 * testbed/optical/architectures.py; the dispatch is generated from it into
 * .output/optsw_archs.h (make -C ebpf), so no list of architectures lives here. */
#define OPTSW_ARCH_CFG_BYTES 64 /* room for one architecture's configuration */

/* Decision codes (written to skb->cb[0] by the egress program, used in counters). */
#define OPTSW_CUT     0 /* left at once on a free output (cut-through; NIC: sent) */
#define OPTSW_BUFFER  1 /* went through the electronic buffer (one OEO conversion) */
#define OPTSW_DROP    2 /* dropped */
#define OPTSW_NOCFG   3 /* no configuration for this node/port (or an unknown architecture):
			  * passed unmodelled */
#define OPTSW_HOLD    4 /* released later by the port's holding qdisc (obsburst): the egress
			  * program stamps the arrival a and leaves out_free alone */

/* cfg_port.flags */
#define OPTSW_PORT_PEER_HOST 1 /* the peer is an end host: it receives the packet when its
				* tail arrives, so the stamp is dep + tau + propagation */
#define OPTSW_PORT_PEER_HOLDS 2 /* the peer releases its packets through a holding mechanism
				 * (obsburst): a packet arriving on this port carries the time it
				 * reached the peer, not an intended arrival here */

/* The burst control packet of the obsburst qdisc (mirror of kernel/obsburst.h, checked by
 * tests/unit/test_btf_layout.py): an Ethernet frame of EtherType OPTSW_OBSB_ETH_P whose
 * payload is struct obsb_ctrl_hdr (48 bytes, big endian); the offsets of the fields read. */
#define OPTSW_OBSB_ETH_P        0x88B5
#define OPTSW_OBSB_MAGIC        0x4F425342 /* "OBSB" */
#define OPTSW_OBSB_VERSION      1
#define OPTSW_OBSB_HDR_LEN      48
#define OPTSW_OBSB_OFF_VERSION  4
#define OPTSW_OBSB_OFF_BURST_ID 8
#define OPTSW_OBSB_OFF_BYTES    16
#define OPTSW_OBSB_OFF_PACKETS  24

/* cfg_route.flags */
#define OPTSW_ROUTE_FLOW_HASH 1 /* per-flow hashing (skb hash) instead of per-packet random */

/* Time delivery type of bpf_skb_set_tstamp / __sk_buff.tstamp_type (uapi value 1 is
 * BPF_SKB_TSTAMP_DELIVERY_MONO on 6.1 and BPF_SKB_CLOCK_MONOTONIC on 6.11+). */
#define OPTSW_TSTAMP_MONO 1

struct optsw_cfg_port {
	__u64 ps_per_byte; /* serialisation: tau(len) = len * ps_per_byte / 1000 ns */
	__u64 prop_ns;     /* propagation delay of the link behind this port */
	__u32 ifindex;     /* ifindex of the port's device in the node's namespace */
	__u32 flags;       /* OPTSW_PORT_* */
};

struct optsw_cfg_node {
	__u32 arch;     /* architecture code (testbed/optical/architectures.py) */
	__u32 n_ports;  /* ports in use, 1..OPTSW_MAX_PORTS */
	/* the architecture's configuration: struct optsw_<name>_cfg of ebpf/arch/<name>.h */
	__u64 arch_cfg[OPTSW_ARCH_CFG_BYTES / 8];
	struct optsw_cfg_port port[OPTSW_MAX_PORTS];
};

struct optsw_ifport_key {
	__u32 node;
	__u32 ifindex;
};

struct optsw_route_key {
	__u32 node;
	__u32 dst;      /* IPv4 destination address, network byte order */
};

struct optsw_route {
	__u32 n;        /* equal-cost output ports in port[], 1..OPTSW_MAX_ECMP */
	__u32 flags;    /* OPTSW_ROUTE_* */
	__u16 port[OPTSW_MAX_ECMP];
};

/* Per-port counters and state (inside the node's state value). */
struct optsw_port_state {
	__u64 out_free_ns;   /* the output is reserved until then (last departure + tau) */
	__u64 cut;           /* packets cut through (NIC: packets sent) */
	__u64 buffered;      /* packets buffered = OEO conversions */
	__u64 dropped;       /* packets dropped */
	__u64 bytes;         /* bytes sent (cut-through + buffered) */
	__u64 busy_ns;       /* sum of tau of the packets sent on this output */
	__u64 max_occ_bytes; /* maximum bytes waiting in this output's FIFO */
	__u64 last_dep_ns;   /* departure time (head leaves) of the latest packet sent */
	__u64 last_rx_real_ns;  /* ingress: bpf_ktime_get_ns() of the latest received packet */
	__u64 last_rx_stamp_ns; /* ingress: its stamped (intended) arrival time, 0 if none */
	__u64 rx;            /* ingress: packets received on this port */
	__u64 nocfg;         /* packets that found no configuration (passed or dropped) */
	__u64 held;          /* packets handed to the port's holding qdisc (OPTSW_HOLD) */
};

/* One buffered packet (occupancy maximum, waiting()): occupies the buffer until dep_ns;
 * free once dep_ns <= the arrival at hand. */
struct optsw_occ_slot {
	__u64 dep_ns;
	__u32 bytes;
	__u16 port;
	__u16 packets;  /* frames in the slot (more than one once merged) */
};

/*
 * The emissions reserved on one buffer output: intervals [start, end) of EO conversion,
 * sorted by start and disjoint. A buffer output is busy only while it emits (tau), so a
 * packet may take a gap between two reservations made earlier for other outputs.
 */
struct optsw_bout {
	__u64 start_ns[OPTSW_BOUT_RES];
	__u64 end_ns[OPTSW_BOUT_RES];
	__u32 n;               /* reservations in use, 0..OPTSW_BOUT_RES */
	__u32 pad;
};

/* One burst announced by a control packet (obs-core, ebpf/arch/obs_core.h). */
struct optsw_obs_burst {
	__u32 left;   /* packets of the burst still to come */
	__u32 lost;   /* 1: the loss draw lost the burst (all of its packets are dropped) */
};

/* The bursts announced on one input port and not yet complete, oldest first. */
struct optsw_obs_ring {
	__u32 head;   /* index of the oldest, 0..OPTSW_OBS_RING-1 */
	__u32 n;      /* bursts in the ring, 0..OPTSW_OBS_RING */
	struct optsw_obs_burst b[OPTSW_OBS_RING];
};

/* OBS state and counters of a node (obs-core; ctrl_elsewhere on every other switch). */
struct optsw_obs_state {
	__u64 announced;      /* valid control packets received (bursts announced) */
	__u64 bursts_lost;    /* ... of them lost by the draw */
	__u64 packets_lost;   /* data packets dropped as part of a lost burst */
	__u64 packets_passed; /* data packets of announced bursts passed */
	__u64 unannounced;    /* data packets on a port without an announced burst */
	__u64 ring_overflow;  /* announcements refused: the port's ring was full */
	__u64 conflicts;      /* burst packets that found their output busy (delayed) */
	__u64 ctrl_elsewhere; /* control packets dropped at a node that is not a core */
	__u64 ctrl_invalid;   /* control frames with a bad magic, version or length */
	__u64 empty_bursts;   /* control packets announcing 0 packets (counted, not queued) */
	struct optsw_obs_ring ring[OPTSW_MAX_PORTS]; /* per input port */
};

/* Holding delay: (arrival here) - (stamp) of the packets arriving on a port whose peer
 * holds (OPTSW_PORT_PEER_HOLDS), i.e. the time from their arrival at the holding node to
 * their arrival here; buckets as optsw_hold_bucket (OPTSW_HOLD_SUB per power of two). */
struct optsw_hold_hist {
	__u64 count;
	__u64 early;      /* arrived before their stamp (counted in bucket 0) */
	__u64 max_ns;
	__u64 sum_ns;
	__u64 over;       /* longer than the last bucket's lower bound (counted in it) */
	__u64 bucket[OPTSW_HOLD_BUCKETS];
};

/* What waits in a node's buffer at an instant (waiting() in optswitch.bpf.c): frames
 * and their bytes, of the node and of one output. */
struct optsw_waiting {
	__u64 bytes;        /* frame bytes waiting in the node */
	__u64 packets;      /* frames waiting in the node */
	__u64 port_bytes;   /* of which for the output asked about */
	__u64 port_packets;
};

struct optsw_node_state {
	struct bpf_spin_lock lock;
	__u32 occ_used;        /* occupancy slots used so far: occ[0 .. occ_used - 1] */
	__u64 max_occ_bytes;   /* maximum bytes in the node's buffer */
	__u64 occ_overflow;    /* buffered packets that found every occupancy slot holding a waiting
				* packet (merged into one) */
	struct optsw_waiting occ_w; /* scratch: waiting() for the packet at hand (the lock's holder) */
	/* Architecture scratch and state (today the hybrid's buffer ports, ebpf/arch/hybrid.h). */
	__u32 sel_bi;          /* scratch: chosen buffer input */
	__u32 sel_bo;          /* scratch: chosen buffer output */
	__u64 bin_free_ns[OPTSW_MAX_NE];  /* buffer inputs busy (OE) until */
	__u64 bout_overflow;   /* reservations that found their buffer output's calendar full */
	__u64 sel_dep;         /* scratch: earliest departure found */
	__u64 sel_t;           /* scratch of the emission search: candidate departure */
	__u32 sel_done;        /* scratch of the emission search: this output's slot found */
	__u32 occ_free;        /* scratch: the slot waiting() chose for occupy() (OPTSW_OCC_SLOTS: none
				 * free) */
	__u32 sel_n;           /* scratch of bout_reserve: reservations kept */
	__u32 sel_pos;         /* scratch of bout_reserve: where the new one goes */
	__u32 sel_drop;        /* scratch of bout_reserve: reservations that ended */
	__u32 sel_best;        /* scratch of bout_reserve: the gap given up */
	struct optsw_port_state port[OPTSW_MAX_PORTS];
	struct optsw_occ_slot occ[OPTSW_OCC_SLOTS];
	struct optsw_bout bout[OPTSW_MAX_NE];
	struct optsw_obs_state obs;       /* ebpf/arch/obs_core.h; ctrl_* of every switch */
	struct optsw_hold_hist hold;      /* ingress on OPTSW_PORT_PEER_HOLDS ports */
};

/*
 * XCP (docs/xcp-edge.md, "(b) S and Q at a core node"): per output and control interval
 * what the node's XCP controller needs. Interval k = [epoch + k d_e, epoch + (k+1) d_e)
 * of a packet's intended arrival a at the node (emulation ns); per output a ring of
 * OPTSW_XCP_SLOTS slots, slot k & (OPTSW_XCP_SLOTS - 1) holding interval k (a slot found
 * holding another interval is reset to k). Written by the egress program under the node
 * lock, right after the decision, when the node's optsw_xcp_cfg is enabled and a >= epoch
 * (a slot without packets counts as never used, so an all-zero value is a valid reset):
 * every decision but OPTSW_NOCFG adds the frame to bytes and packets (a drop to drops too);
 * a decision that gives the output's backlog (every one but OPTSW_HOLD: the backlog is
 * then the holding qdisc's) lowers qmin_ns to (out_free - a)^+, out_free as the arrival
 * found it. Read by the XCP agent (no lock: a closed interval is not written unless a
 * packet is late).
 */
#define OPTSW_XCP_SLOTS 4 /* intervals kept per output (a power of two) */
#define OPTSW_XCP_NONE  0xffffffffffffffffULL /* interval never used / qmin_ns no arrival */
#define OPTSW_XCP_NO_CLASS 0xffffffffU /* optsw_pkt.cls: none */

struct optsw_xcp_slot {
	__u64 interval;   /* k of this slot, OPTSW_XCP_NONE = never used */
	__u64 bytes;      /* frame bytes decided for this output arriving in k (dropped included) */
	__u64 qmin_ns;    /* smallest backlog (out_free - a)^+ found by an arrival, ns;
			   * OPTSW_XCP_NONE = none (no arrival, or only held packets) */
	__u32 packets;    /* packets decided for this output arriving in k */
	__u32 drops;      /* of which dropped */
};

/* optsw_xcp_acc value: one node's rings, slot[port][k & (OPTSW_XCP_SLOTS - 1)] (8 KB). */
struct optsw_xcp_node {
	struct optsw_xcp_slot slot[OPTSW_MAX_PORTS][OPTSW_XCP_SLOTS];
};

/* optsw_xcp_cfg value: one node's XCP configuration (all zero: off). */
struct optsw_xcp_cfg {
	__u32 enabled;       /* 1: accumulate into optsw_xcp_acc */
	__u32 acks_separate; /* xcp-edge: a pure ACK takes class + 1 (its own macroflow) */
	__u64 epoch_ns;      /* E: start of interval 0, emulation ns of CLOCK_MONOTONIC */
	__u64 interval_ns;   /* d_e: the control interval, emulation ns (0: nothing accumulated) */
};

/* optsw_xcp_class key: an xcp-edge node and a destination; value __u32, the data class
 * of the macroflow towards that destination's egress edge (the pacer's class id). */
struct optsw_xcp_class_key {
	__u32 node;
	__u32 dst_ip;     /* IPv4 destination address, network byte order */
};

/* Test hook (BPF_PROG_TEST_RUN only, when rodata tb_test_mode = 1). */
struct optsw_hook {
	__u64 now_ns;  /* the time the packet reaches the program (arrival at the switch) */
	__u32 len;     /* wire length in bytes used by the model (0: skb->len) */
	__u32 port;    /* egress: the output port; ingress: the input port */
	__u32 rand;    /* the "random" number of the per-packet ECMP choice */
	__u32 pad;
	__u64 stamp_ns; /* ingress: the packet's monotonic stamp (0: none) */
};

/* Fidelity monitor: lateness = (time a packet is seen at the next node's ingress) -
 * (its stamped time); log-linear buckets, 8 per power of two (see optsw_late_bucket). */
struct optsw_monitor {
	__u64 count;
	__u64 early;      /* seen before the stamped time (counted in bucket 0) */
	__u64 max_ns;
	__u64 sum_ns;
	__u64 bucket[OPTSW_LATE_BUCKETS];
};

#endif /* OTT_OPTSWITCH_H */
