// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * optswitch: an optical packet switch node as two tc (clsact, direct-action) programs.
 *
 * Model: W. Minakhmetov, T. Ware, L. Iannone, "Hybrid and all-optical packet switching
 * in a datacenter network with TCP", sections II (hybrid switch architecture) and IV
 * (simulated switches). See docs/optical-switch.md for the model, the parameters, the
 * counters and where this kernel realisation differs from the paper.
 *
 *   optsw_ingress  on every port of a switch: forward an IPv4 packet by destination to
 *                  one of its equal-cost output ports, chosen uniformly at random per
 *                  packet (or by flow hash), with bpf_redirect, passing the output and
 *                  input ports in skb->cb[0] / cb[1]. A burst control packet (EtherType
 *                  0x88B5, kernel/obsburst.h) goes to the node's control unit (obs-core)
 *                  and is consumed. On every port of any node: the fidelity monitor (how
 *                  late the packet is against its stamp), except on a port whose peer
 *                  holds (obsburst), where the stamp is the arrival at that peer: the
 *                  holding-delay histogram instead, and the packet is re-stamped now.
 *   optsw_egress   on every port: the port model. Per packet it decides cut-through,
 *                  buffer or drop and the departure time, and stamps skb->tstamp with
 *                  the earliest departure time; the fq qdisc of the port releases the
 *                  packet then. On a host (model NIC) it serialises at the link rate.
 *                  OPTSW_HOLD (obs-edge): the port's holding qdisc (obsburst) releases
 *                  it; the stamp is then its arrival here.
 *
 * Time. A packet's arrival time at a node is its stamp from the previous node (the
 * intended arrival, carried as a monotonic delivery time across the veth), or
 * bpf_ktime_get_ns() if it has none (a host's own packets: max(now, TCP's EDT)). All
 * decisions are therefore taken on the intended timeline and do not depend on how late
 * the emulation runs, as long as packets reach a node in their intended order.
 *
 * Decisions need the state of the whole switch (buffer ports are shared by all
 * outputs), so each node's state is one array element guarded by a bpf_spin_lock.
 *
 * Identity: tb_node_id (rodata, one load per node) and the port from the
 * (node, ifindex) -> port map filled by the testbed; never an ifindex alone.
 * Test mode (tb_test_mode = 1): time, length, port, random number and the ingress
 * stamp come from the optsw_hook map, so BPF_PROG_TEST_RUN is deterministic; the egress
 * program reads the input port from cb[1] of the test run's context.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "optswitch.h"

#ifndef TC_ACT_OK
#define TC_ACT_OK 0
#define TC_ACT_SHOT 2
#endif
#ifndef ETH_P_IP
#define ETH_P_IP 0x0800
#endif

const volatile __u32 tb_node_id = 0;
const volatile __u8 tb_test_mode = 0;
const volatile __u8 tb_is_switch = 1; /* 0 on hosts: ingress only monitors */
/* 1 on a node whose architecture admits against what waits in it (optical_ram_decide: the
 * registry's reads_waiting): the egress runs waiting() before the decision when the output
 * is busy; 0 elsewhere (waiting() only for a packet it buffers). Known to the verifier at
 * load, which walks only the branch this node takes. */
const volatile __u8 tb_reads_waiting = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, OPTSW_MAX_NODES);
	__type(key, __u32);
	__type(value, struct optsw_cfg_node);
} optsw_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, OPTSW_MAX_NODES);
	__type(key, __u32);
	__type(value, struct optsw_node_state);
} optsw_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, OPTSW_MAX_NODES * OPTSW_MAX_PORTS);
	__type(key, struct optsw_ifport_key);
	__type(value, __u32);
} optsw_ifport SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, OPTSW_ROUTES_MAX);
	__type(key, struct optsw_route_key);
	__type(value, struct optsw_route);
} optsw_routes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct optsw_hook);
} optsw_hook SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct optsw_monitor);
} optsw_monitor SEC(".maps");

/* XCP (optswitch.h, docs/xcp-edge.md): per node the per-interval accumulators of its
 * outputs, its configuration, and the class of each destination at an xcp-edge node. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, OPTSW_MAX_NODES);
	__type(key, __u32);
	__type(value, struct optsw_xcp_node);
} optsw_xcp_acc SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, OPTSW_MAX_NODES);
	__type(key, __u32);
	__type(value, struct optsw_xcp_cfg);
} optsw_xcp_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, OPTSW_ROUTES_MAX);
	__type(key, struct optsw_xcp_class_key);
	__type(value, __u32);
} optsw_xcp_class SEC(".maps");

static __always_inline struct optsw_hook *hook(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&optsw_hook, &zero);
}

#define NO_PORT 0xffffffffU

/* Port id of the device the packet is on, or NO_PORT. */
static __always_inline __u32 port_of(struct __sk_buff *skb, struct optsw_hook *h)
{
	struct optsw_ifport_key k = { .node = tb_node_id, .ifindex = skb->ifindex };
	__u32 *p;

	if (tb_test_mode)
		return h ? h->port : NO_PORT;
	p = bpf_map_lookup_elem(&optsw_ifport, &k);
	return p ? *p : NO_PORT;
}

/* Counters of port p of st, or NULL (bounds made visible to the verifier). */
static __always_inline struct optsw_port_state *port_state(struct optsw_node_state *st, __u32 p)
{
	if (!st || p >= OPTSW_MAX_PORTS)
		return NULL;
	barrier_var(p);
	p &= OPTSW_MAX_PORTS - 1;
	return &st->port[p];
}

/* floor(log2 v) for v > 0 (branch-free steps the verifier follows easily). */
static __always_inline __u32 ilog2_u64(__u64 v)
{
	__u32 e = 0;

	if (v >> 32) { e += 32; v >>= 32; }
	if (v >> 16) { e += 16; v >>= 16; }
	if (v >> 8) { e += 8; v >>= 8; }
	if (v >> 4) { e += 4; v >>= 4; }
	if (v >> 2) { e += 2; v >>= 2; }
	if (v >> 1) { e += 1; }
	return e;
}

/* Log-linear bucket of a lateness in ns: exact below 8, then 8 per power of two. */
static __always_inline __u32 late_bucket(__u64 v)
{
	__u32 e;

	if (v < 8)
		return (__u32)v;
	e = ilog2_u64(v); /* >= 3 */
	return (e - 2) * 8 + (__u32)((v >> (e - 3)) & 7); /* <= 495 */
}

static __always_inline void monitor(__u64 now, __u64 stamp)
{
	struct optsw_monitor *m;
	__u32 zero = 0, b;
	__u64 late = 0;

	m = bpf_map_lookup_elem(&optsw_monitor, &zero);
	if (!m)
		return;
	if (now >= stamp)
		late = now - stamp;
	else
		__sync_fetch_and_add(&m->early, 1);
	b = late_bucket(late) & (OPTSW_LATE_BUCKETS - 1);
	__sync_fetch_and_add(&m->bucket[b], 1);
	__sync_fetch_and_add(&m->count, 1);
	__sync_fetch_and_add(&m->sum_ns, late);
	if (late > m->max_ns)
		m->max_ns = late; /* racy maximum: at worst a concurrent larger value is lost */
}

/* The packet's stamped (intended) time, 0 if it carries no monotonic delivery time. */
static __always_inline __u64 stamped_time(struct __sk_buff *skb)
{
	if (skb->tstamp_type == OPTSW_TSTAMP_MONO)
		return skb->tstamp;
	return 0;
}

static __always_inline __u64 max64(__u64 a, __u64 b)
{
	return a > b ? a : b;
}

/*
 * What waits in the node's buffer at a, into st->occ_w: every buffered packet that has
 * arrived and whose head has not left (dep > a), over all outputs and for output port. A
 * packet being sent no longer counts (how an ns-2 queue counts; the optical RAM
 * architectures admit against it, docs/e5.md). Called under the node lock, at most once
 * per packet (optsw_egress: before the decision if tb_reads_waiting and the output is
 * busy, else in occupy() for a buffered packet): two inlined copies of the loop, not one
 * per caller. Scans every slot, from occ_used - 1 down, wrapping, and leaves in
 * st->occ_free the free slot (dep <= a) it saw last: slot occ_used while some slot was
 * never used, else the lowest free one, else OPTSW_OCC_SLOTS (every slot holds a waiting
 * packet). The index comes from a volatile read and the free index goes to the map value:
 * with constants (k, or a free index in a register or on the stack) the verifier learns
 * bounds per iteration and prunes nothing, and a scan that stops at occ_used, or at a
 * slot count chosen by rodata, passed the 6.1 verifier's 1M instructions
 * (docs/environment.md). Exact while at most OPTSW_OCC_SLOTS buffered packets wait in the
 * node at once; beyond, occupy() has merged packets into slots and the sums are an upper
 * bound (counted in occ_overflow).
 */
static __always_inline void waiting(struct optsw_node_state *st, __u32 port, __u64 a)
{
	__u64 bytes = 0, packets = 0, port_bytes = 0, port_packets = 0;
	const volatile __u32 *used = &st->occ_used; /* re-read: no learnt bounds */
	volatile __u32 *free = &st->occ_free;

	*free = OPTSW_OCC_SLOTS;
	for (__u32 k = 0; k < OPTSW_OCC_SLOTS; k++) {
		__u32 i = (*used - 1 - k) & (OPTSW_OCC_SLOTS - 1);
		struct optsw_occ_slot *s = &st->occ[i];

		if (s->dep_ns > a) {
			bytes += s->bytes;
			packets += s->packets;
			if (s->port == port) {
				port_bytes += s->bytes;
				port_packets += s->packets;
			}
		} else {
			*free = i;
		}
	}
	st->occ_w.bytes = bytes;
	st->occ_w.packets = packets;
	st->occ_w.port_bytes = port_bytes;
	st->occ_w.port_packets = port_packets;
}

/*
 * Occupancy bookkeeping of a buffered packet (called under the node lock): the buffer
 * holds it from its arrival a until its departure dep, in the slot waiting() chose (one
 * never used, in index order, while there is one; then the lowest whose packet's head
 * has left, dep <= a). have_w on a tb_reads_waiting node: waiting() already ran for this
 * packet (st->occ_w, st->occ_free are its). If every one of the OPTSW_OCC_SLOTS
 * slots holds a waiting packet, the new packet is merged into one (taken round-robin):
 * its bytes then count until the later departure (an upper bound), and occ_overflow
 * counts the event. Updates the node and port maxima.
 */
static __always_inline void occupy(struct optsw_node_state *st, __u32 port, __u64 a,
				   __u64 dep, __u32 len, int have_w)
{
	struct optsw_occ_slot *n;
	__u64 total, mine;
	__u32 i;

	if (!tb_reads_waiting || !have_w)
		waiting(st, port, a);
	total = st->occ_w.bytes + len;
	mine = st->occ_w.port_bytes + len;
	i = st->occ_free;
	if (i < OPTSW_OCC_SLOTS) {
		n = &st->occ[i & (OPTSW_OCC_SLOTS - 1)];
		n->dep_ns = dep;
		n->bytes = len;
		n->packets = 1;
		n->port = port;
		if (i >= st->occ_used)
			st->occ_used = i + 1; /* i == occ_used: the next never used */
	} else {
		n = &st->occ[st->occ_overflow & (OPTSW_OCC_SLOTS - 1)];
		n->bytes += len;
		if (n->packets < 0xffff)
			n->packets++; /* (a merged slot of 65535 frames undercounts: never reached) */
		n->dep_ns = max64(n->dep_ns, dep);
		st->occ_overflow++;
	}
	if (total > st->max_occ_bytes)
		st->max_occ_bytes = total;
	if (port < OPTSW_MAX_PORTS && mine > st->port[port].max_occ_bytes)
		st->port[port].max_occ_bytes = mine;
}

/* An output released at a is free for a packet arriving at a: it leaves at once. */
static __always_inline int output_free(struct optsw_port_state *ps, __u64 a, __u64 *dep)
{
	if (ps->out_free_ns > a)
		return 0;
	*dep = a;
	return 1;
}

/*
 * The port architectures (testbed/optical/architectures.py, one registry entry each).
 * Each has a header ebpf/arch/<name>.h that defines its decision, OPTSW_DECIDE(<name>),
 * called under the node's lock for a packet of duration tau arriving at a (its intended
 * arrival) for the output whose state is ps: it returns OPTSW_CUT or OPTSW_BUFFER with
 * *dep = the departure of the packet's head, or OPTSW_DROP. It may read its configuration
 * (struct optsw_<name>_cfg, packed by the registry) from cfg->arch_cfg, the packet's
 * input port, length and output port configuration from pkt, and keep state in st; the
 * counters, the occupancy and the stamp are the program's. OPTSW_HOLD (no *dep) hands
 * the packet to the port's holding qdisc. The generated
 * .output/optsw_archs.h includes every header of the registry and defines
 * optsw_arch_decide(arch, ...), which calls the one of code arch, or returns OPTSW_NOCFG
 * for an unknown code.
 */
struct optsw_pkt {
	const struct optsw_cfg_port *out_cfg; /* configuration of the output port */
	__u32 in_port;  /* input port (NO_PORT if unknown: a host's own packet) */
	__u32 out_port; /* output port */
	__u32 len;      /* wire length in bytes */
	__u32 cls;      /* the packet's class, set by OPTSW_PREPARE (xcp-edge), else
			 * OPTSW_XCP_NO_CLASS; written to cb[2] of a held packet that has one */
};

/* Bytes of an Ethernet header: the optical RAM architectures count IP datagram bytes
 * (the paper's packet size), a frame's length less this. */
#define OPTSW_ETH_HLEN 14

/*
 * The decision of the optical RAM architectures (ob, sb, wcsb: ebpf/arch/<name>.h;
 * Alparslan, Arakawa, Murata, II-B): cut-through on a free output; else the packet waits
 * in its output's FIFO, leaving when the output is free (virtual cut-through, the paper's
 * "cut-through packet switching and buffering"), if the IP bytes waiting (waiting(): for
 * its output if per_port, else in the whole node) plus its own are at most bound; else
 * dropped. IP bytes = frame bytes less OPTSW_ETH_HLEN per frame. On a node whose program
 * was loaded without tb_reads_waiting (waiting() has not run), a packet finding its
 * output busy is dropped and counted unmodelled too (nocfg); returning OPTSW_NOCFG here
 * instead took the 6.1 verifier past 1M instructions (a new constant decision to walk
 * the rest with).
 */
static __always_inline __u32 optical_ram_decide(struct optsw_node_state *st,
						const struct optsw_pkt *pkt,
						struct optsw_port_state *ps, __u64 a, __u64 *dep,
						__u64 bound, int per_port)
{
	__u64 ip_len, held;

	if (output_free(ps, a, dep))
		return OPTSW_CUT;
	if (!tb_reads_waiting) {
		ps->nocfg++;
		return OPTSW_DROP;
	}
	/* the output is busy: optsw_egress ran waiting() for this packet */
	if (per_port)
		held = st->occ_w.port_bytes - st->occ_w.port_packets * OPTSW_ETH_HLEN;
	else
		held = st->occ_w.bytes - st->occ_w.packets * OPTSW_ETH_HLEN;
	ip_len = pkt->len > OPTSW_ETH_HLEN ? pkt->len - OPTSW_ETH_HLEN : 0;
	if (held + ip_len > bound)
		return OPTSW_DROP;
	*dep = ps->out_free_ns;
	return OPTSW_BUFFER;
}

/* A burst control packet read by the ingress program (host byte order). */
struct optsw_ctrl {
	__u64 burst_id; /* per obsburst qdisc, from 1 */
	__u64 bytes;    /* burst length in bytes */
	__u32 packets;  /* burst length in packets */
	__u32 in_port;  /* the input port it arrived on (< OPTSW_MAX_PORTS) */
};

/*
 * An architecture whose nodes process burst control packets (a control unit: obs-core)
 * defines OPTSW_CONTROL(<name>) in its header too: called under the node's lock for a
 * valid control packet c, it returns 1 (it counts what it wants; the program then drops
 * the frame). archgen.py finds the definition in the header and generates
 * optsw_arch_control(arch, st, cfg, c), which returns 0 for an architecture without one.
 */
#define OPTSW_CONTROL(name)                                                                   \
	static __always_inline int optsw_##name##_control(struct optsw_node_state *st,          \
							  const struct optsw_cfg_node *cfg,     \
							  const struct optsw_ctrl *c)

/*
 * An architecture whose decision needs what cannot be had under the node lock (a map
 * lookup, the packet's headers: no helper may be called while a bpf_spin_lock is held)
 * defines OPTSW_PREPARE(<name>) in its header too: called before the lock with the packet
 * and the node's configuration, it fills what its decision reads into *pkt (today
 * pkt->cls: xcp-edge's class). archgen.py finds the definition and generates
 * optsw_arch_prepare(arch, skb, cfg, pkt), which does nothing for the others.
 */
#define OPTSW_PREPARE(name)                                                                   \
	static __always_inline void optsw_##name##_prepare(struct __sk_buff *skb,               \
							   const struct optsw_cfg_node *cfg,    \
							   struct optsw_pkt *pkt)

#define OPTSW_DECIDE(name)                                                                    \
	static __always_inline __u32 optsw_##name##_decide(struct optsw_node_state *st,         \
							  const struct optsw_cfg_node *cfg,     \
							  const struct optsw_pkt *pkt,          \
							  struct optsw_port_state *ps, __u64 a, \
							  __u64 tau, __u64 *dep)
#include "optsw_archs.h"

/* Log-linear bucket of a holding delay in ns: exact below OPTSW_HOLD_SUB, then
 * OPTSW_HOLD_SUB per power of two, clamped to the last bucket (2^35 ns and more). */
static __always_inline __u32 hold_bucket(__u64 v)
{
	__u32 e, idx;

	if (v < OPTSW_HOLD_SUB)
		return (__u32)v;
	e = ilog2_u64(v); /* >= 4 */
	idx = (e - 3) * OPTSW_HOLD_SUB + (__u32)((v >> (e - 4)) & (OPTSW_HOLD_SUB - 1));
	return idx < OPTSW_HOLD_BUCKETS ? idx : OPTSW_HOLD_BUCKETS - 1;
}

/* Record a packet's holding delay now - stamp (ns) into the node's histogram. */
static __always_inline void hold_record(struct optsw_hold_hist *hh, __u64 now, __u64 stamp)
{
	__u64 d = 0;
	__u32 b;

	if (now >= stamp)
		d = now - stamp;
	else
		__sync_fetch_and_add(&hh->early, 1);
	b = hold_bucket(d);
	if (b == OPTSW_HOLD_BUCKETS - 1)
		__sync_fetch_and_add(&hh->over, 1);
	/* The mask bounds the index for the verifier (6.1 loses the clamp's bound, see
	 * OPTSW_LATE_BUCKETS); the barrier keeps clang from dropping it as redundant. */
	barrier_var(b);
	b &= OPTSW_HOLD_BUCKETS - 1;
	__sync_fetch_and_add(&hh->bucket[b], 1);
	__sync_fetch_and_add(&hh->count, 1);
	__sync_fetch_and_add(&hh->sum_ns, d);
	if (d > hh->max_ns)
		hh->max_ns = d; /* racy maximum, as in monitor() */
}

/*
 * A frame of EtherType OPTSW_OBSB_ETH_P (a burst control packet of the obsburst qdisc)
 * arriving at a switch on input port in_port: a valid one (magic, version, length) goes
 * to the control unit of the node's architecture (OPTSW_CONTROL, under the node lock);
 * a node whose architecture has none counts it in ctrl_elsewhere. Always consumed.
 */
static __always_inline int control_packet(struct __sk_buff *skb, struct optsw_node_state *st,
					  const struct optsw_cfg_node *cfg, __u32 in_port)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u8 *hdr = data + sizeof(struct ethhdr);
	struct optsw_ctrl c = { .in_port = in_port };
	int handled;

	if (!st)
		return TC_ACT_SHOT;
	if ((void *)(hdr + OPTSW_OBSB_HDR_LEN) > data_end || !cfg || in_port >= OPTSW_MAX_PORTS ||
	    bpf_ntohl(*(__be32 *)hdr) != OPTSW_OBSB_MAGIC ||
	    hdr[OPTSW_OBSB_OFF_VERSION] != OPTSW_OBSB_VERSION) {
		__sync_fetch_and_add(&st->obs.ctrl_invalid, 1);
		return TC_ACT_SHOT;
	}
	c.burst_id = bpf_be64_to_cpu(*(__be64 *)(hdr + OPTSW_OBSB_OFF_BURST_ID));
	c.bytes = bpf_be64_to_cpu(*(__be64 *)(hdr + OPTSW_OBSB_OFF_BYTES));
	c.packets = bpf_ntohl(*(__be32 *)(hdr + OPTSW_OBSB_OFF_PACKETS));
	bpf_spin_lock(&st->lock);
	handled = optsw_arch_control(cfg->arch, st, cfg, &c);
	bpf_spin_unlock(&st->lock);
	if (!handled)
		__sync_fetch_and_add(&st->obs.ctrl_elsewhere, 1);
	return TC_ACT_SHOT; /* the control unit consumes it (or it is not part of the model) */
}

SEC("tc")
int optsw_ingress(struct __sk_buff *skb)
{
	struct optsw_hook *h = tb_test_mode ? hook() : NULL;
	/* (volatile: else clang loads through a select of the hook and the ctx pointer,
	 * which the verifier refuses as a modified ctx pointer) */
	__u64 stamp = tb_test_mode ? (h ? *(volatile __u64 *)&h->stamp_ns : 0) : stamped_time(skb);
	__u64 now = tb_test_mode ? (h ? h->now_ns : 0) : bpf_ktime_get_ns();
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	struct optsw_route_key rk = { .node = tb_node_id };
	struct optsw_node_state *st;
	struct optsw_cfg_node *cfg;
	struct optsw_route *r;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct optsw_port_state *in;
	__u32 node = tb_node_id, idx, out, in_port;
	int holds = 0;

	st = bpf_map_lookup_elem(&optsw_state, &node);
	cfg = bpf_map_lookup_elem(&optsw_cfg, &node);
	in_port = port_of(skb, h);
	in = port_state(st, in_port);
	if (in && cfg && in_port < OPTSW_MAX_PORTS)
		holds = cfg->port[in_port & (OPTSW_MAX_PORTS - 1)].flags & OPTSW_PORT_PEER_HOLDS;
	if (in) {
		__sync_fetch_and_add(&in->rx, 1);
		in->last_rx_real_ns = now;
		in->last_rx_stamp_ns = stamp;
	}
	if ((void *)(eth + 1) <= data_end && eth->h_proto == bpf_htons(OPTSW_OBSB_ETH_P)) {
		/* A burst control packet: no data packet's stamp, on any node. */
		if (!tb_is_switch)
			return TC_ACT_OK;
		return control_packet(skb, st, cfg, in ? in_port : NO_PORT);
	}
	if (stamp && holds) {
		/* The peer held the packet (obsburst): its stamp is its arrival there, not an
		 * intended arrival here. Record the holding delay, then treat the packet as
		 * arriving now (re-stamped below). */
		hold_record(&st->hold, now, stamp);
		stamp = 0;
	} else if (stamp && !tb_test_mode) {
		monitor(now, stamp);
	}
	if (!tb_is_switch)
		return TC_ACT_OK;

	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return TC_ACT_SHOT; /* the optical fabric carries IPv4 only (no ARP, no IPv6) */
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end)
		return TC_ACT_SHOT;
	rk.dst = ip->daddr;
	r = bpf_map_lookup_elem(&optsw_routes, &rk);
	if (!r || !cfg || r->n == 0) {
		if (in)
			__sync_fetch_and_add(&in->nocfg, 1);
		return TC_ACT_SHOT;
	}
	if (r->flags & OPTSW_ROUTE_FLOW_HASH)
		idx = bpf_get_hash_recalc(skb);
	else
		idx = tb_test_mode ? (h ? h->rand : 0) : bpf_get_prandom_u32();
	idx = r->n ? idx % r->n : 0;
	if (idx >= OPTSW_MAX_ECMP)
		return TC_ACT_SHOT;
	out = r->port[idx];
	if (out >= OPTSW_MAX_PORTS)
		return TC_ACT_SHOT;
	barrier_var(out);
	out &= OPTSW_MAX_PORTS - 1;
	skb->cb[0] = out;
	skb->cb[1] = in ? in_port : NO_PORT; /* the input port, for the decision */
	/* Carry the arrival time to the egress program as a monotonic delivery time. */
	if (!stamp) {
		stamp = now;
		if (tb_test_mode)
			skb->tstamp = stamp;
		else
			bpf_skb_set_tstamp(skb, stamp, OPTSW_TSTAMP_MONO);
	}
	return bpf_redirect(cfg->port[out].ifindex, 0);
}

/*
 * XCP's per-interval accumulator (optswitch.h, struct optsw_xcp_slot): a packet of len
 * frame bytes arriving at a, decided `decision` for output port ps, counted if the node's
 * XCP configuration xc is on and a >= its epoch. Called under the node lock right after
 * the decision, before its counters (ps->out_free_ns is still what the arrival found),
 * for every decision but OPTSW_NOCFG. The maps were looked up before the lock (no helper
 * under it); every test is here, after the decision, so that the verifier walks the
 * decisions once, not once per outcome of these tests. One division, no loop.
 */
static __always_inline void xcp_account(struct optsw_xcp_node *xn, const struct optsw_xcp_cfg *xc,
					const struct optsw_port_state *ps, __u32 port, __u64 a, __u32 len,
					__u32 decision)
{
	__u64 epoch = xc->epoch_ns, d_e = xc->interval_ns, k, backlog;
	struct optsw_xcp_slot *s;
	__u32 slot;

	if (!xc->enabled || !d_e || a < epoch)
		return;
	k = (a - epoch) / d_e;
	slot = (__u32)k & (OPTSW_XCP_SLOTS - 1);
	barrier_var(port);
	port &= OPTSW_MAX_PORTS - 1;
	s = &xn->slot[port][slot];
	if (s->interval != k || !s->packets) { /* (no packets: never used, e.g. all zero) */
		s->interval = k;
		s->bytes = 0;
		s->qmin_ns = OPTSW_XCP_NONE;
		s->packets = 0;
		s->drops = 0;
	}
	s->bytes += len;
	s->packets++;
	if (decision == OPTSW_DROP)
		s->drops++;
	if (decision == OPTSW_HOLD)
		return;
	/* the backlog this arrival found: the decision has not moved out_free yet */
	backlog = ps->out_free_ns > a ? ps->out_free_ns - a : 0;
	if (backlog < s->qmin_ns)
		s->qmin_ns = backlog;
}

SEC("tc")
int optsw_egress(struct __sk_buff *skb)
{
	struct optsw_hook *h = tb_test_mode ? hook() : NULL;
	__u32 node = tb_node_id;
	struct optsw_node_state *st;
	struct optsw_cfg_node *cfg;
	struct optsw_cfg_port *pc;
	struct optsw_port_state *ps;
	struct optsw_pkt pkt = { .cls = OPTSW_XCP_NO_CLASS };
	struct optsw_xcp_node *xn;
	struct optsw_xcp_cfg *xc;
	__u64 a, tau, dep = 0, stamp, now;
	__u32 len, decision, port;
	int have_w;

	now = tb_test_mode ? (h ? h->now_ns : 0) : bpf_ktime_get_ns();
	len = (tb_test_mode && h && h->len) ? h->len : skb->len;
	port = port_of(skb, h);
	cfg = bpf_map_lookup_elem(&optsw_cfg, &node);
	st = bpf_map_lookup_elem(&optsw_state, &node);
	ps = port_state(st, port);
	/* XCP's accumulator (no helper under the lock: looked up here). Arrays of the same
	 * nodes as optsw_cfg: absent only where cfg is, so checked with it (one path on). */
	xc = bpf_map_lookup_elem(&optsw_xcp_cfg, &node);
	xn = bpf_map_lookup_elem(&optsw_xcp_acc, &node);
	if (!cfg || !ps || !xc || !xn || port >= cfg->n_ports) {
		skb->cb[0] = OPTSW_NOCFG;
		if (ps)
			__sync_fetch_and_add(&ps->nocfg, 1);
		return tb_is_switch ? TC_ACT_SHOT : TC_ACT_OK;
	}
	if (skb->protocol != bpf_htons(ETH_P_IP) && !tb_test_mode) {
		/* Not part of the model (IPv6 ND, ...): keep it off the optical fabric. */
		__sync_fetch_and_add(&ps->nocfg, 1);
		return TC_ACT_SHOT;
	}
	barrier_var(port);
	port &= OPTSW_MAX_PORTS - 1;
	pc = &cfg->port[port];
	tau = (__u64)len * pc->ps_per_byte / 1000;
	stamp = tb_test_mode ? 0 : stamped_time(skb);
	if (tb_is_switch)
		a = stamp ? stamp : now; /* intended arrival at this switch */
	else
		a = max64(now, stamp); /* the host's own packet: now, or later if TCP paces */

	pkt.out_cfg = pc;
	pkt.out_port = port;
	pkt.len = len;
	/* set by optsw_ingress (test mode: given in the context); a host's own packet has none */
	pkt.in_port = tb_is_switch ? skb->cb[1] : NO_PORT;
	optsw_arch_prepare(cfg->arch, skb, cfg, &pkt);

	bpf_spin_lock(&st->lock);
	/* What waits in the node now, on a node whose architecture admits against it (only
	 * with the output busy: optical_ram_decide), kept for occupy(). (tb_reads_waiting
	 * tested here, not folded into have_w: that form doubled the paths the verifier
	 * walks, 460 k -> 775 k instructions on 6.18) */
	have_w = ps->out_free_ns > a;
	if (tb_reads_waiting && have_w)
		waiting(st, port, a);
	decision = optsw_arch_decide(cfg->arch, st, cfg, &pkt, ps, a, tau, &dep);
	if (decision != OPTSW_NOCFG)
		xcp_account(xn, xc, ps, port, a, len, decision);
	if (decision == OPTSW_DROP) {
		ps->dropped++;
	} else if (decision == OPTSW_HOLD) {
		ps->held++;
	} else if (decision != OPTSW_NOCFG) {
		ps->out_free_ns = dep + tau;
		ps->last_dep_ns = dep;
		ps->bytes += len;
		ps->busy_ns += tau;
		if (decision == OPTSW_CUT) {
			ps->cut++;
		} else {
			ps->buffered++;
			occupy(st, port, a, dep, len, have_w);
		}
	}
	bpf_spin_unlock(&st->lock);

	skb->cb[0] = decision;
	if (decision == OPTSW_NOCFG) {
		__sync_fetch_and_add(&ps->nocfg, 1);
		return tb_is_switch ? TC_ACT_SHOT : TC_ACT_OK;
	}
	if (decision == OPTSW_DROP)
		return TC_ACT_SHOT;
	if (decision == OPTSW_HOLD) {
		/* The port's holding qdisc releases it; the stamp is its arrival here, which
		 * the next node (port flag OPTSW_PORT_PEER_HOLDS) reads as such; its class
		 * (xcp-edge: the pacer's) in cb[2]. */
		if (pkt.cls != OPTSW_XCP_NO_CLASS)
			skb->cb[2] = pkt.cls;
		if (tb_test_mode)
			skb->tstamp = a;
		else
			bpf_skb_set_tstamp(skb, a, OPTSW_TSTAMP_MONO);
		return TC_ACT_OK;
	}
	/* Stamp the intended arrival at the next node: the head after the propagation
	 * delay (a switch may cut through), or the tail if the peer is an end host. */
	stamp = dep + pc->prop_ns + ((pc->flags & OPTSW_PORT_PEER_HOST) ? tau : 0);
	if (tb_test_mode)
		skb->tstamp = stamp;
	else
		bpf_skb_set_tstamp(skb, stamp, OPTSW_TSTAMP_MONO);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
