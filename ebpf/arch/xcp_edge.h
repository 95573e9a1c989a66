/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * Port architecture "xcp-edge" (testbed/optical/architectures.py): E5's edge node when XCP
 * paces macroflows (docs/xcp-edge.md, "(a) The edge pacer"; Alparslan, Arakawa, Murata,
 * II-A "Optical Rate-based Paced XCP", III-A). Packets towards the optical core are paced
 * per macroflow class by the xcppace qdisc of the output port (kernel/sch_xcppace.c),
 * which releases them: the program stamps their arrival a here (OPTSW_HOLD, as obs-edge)
 * and gives their class in cb[2]: the data class of the destination's egress edge (map
 * optsw_xcp_class, key (node, destination IPv4)), + 1 for a pure ACK (IPv4 TCP, ACK set,
 * SYN, FIN and RST clear, no payload) when the node's optsw_xcp_cfg has acks_separate. A
 * packet towards the core whose destination has no class is not part of the model: it is
 * dropped and counted in the port's nocfg (OPTSW_NOCFG). Packets towards a host are
 * stored and forwarded as "fifo" (received whole, FIFO, dropped if they would wait longer
 * than max_wait). Included by the generated dispatch of optswitch.bpf.c.
 */

/* cfg_node.arch_cfg of an xcp-edge node (testbed/optical/architectures.py packs it). */
struct optsw_xcp_edge_cfg {
	__u64 max_wait_ns; /* longest wait in the buffer, emulation ns (here: towards hosts;
			    * the xcppace qdisc's options carry it for the core side) */
};

#define OPTSW_TCP_FIN 0x01
#define OPTSW_TCP_SYN 0x02
#define OPTSW_TCP_RST 0x04
#define OPTSW_TCP_ACK 0x10

/* Whether the IPv4 packet whose header is ip (read from skb) is a pure ACK: TCP, not a
 * later fragment, ACK set, SYN / FIN / RST clear, no payload (IP total length = IP header
 * + TCP header: Ethernet padding does not count). */
static __always_inline int xcp_pure_ack(struct __sk_buff *skb, const struct iphdr *ip)
{
	__u8 tcp[14]; /* the TCP header up to its flags */
	__u32 ihl = ip->ihl * 4, doff;

	if (ip->version != 4 || ip->protocol != IPPROTO_TCP || ihl < sizeof(*ip) ||
	    (ip->frag_off & bpf_htons(0x1fff)))
		return 0;
	if (bpf_skb_load_bytes(skb, sizeof(struct ethhdr) + ihl, tcp, sizeof(tcp)) < 0)
		return 0;
	doff = (tcp[12] >> 4) * 4;
	if (!(tcp[13] & OPTSW_TCP_ACK) || (tcp[13] & (OPTSW_TCP_SYN | OPTSW_TCP_FIN | OPTSW_TCP_RST)))
		return 0;
	return bpf_ntohs(ip->tot_len) == ihl + doff;
}

/* The class of a packet towards the core (before the node lock): pkt->cls, or left
 * OPTSW_XCP_NO_CLASS when its destination has none. */
OPTSW_PREPARE(xcp_edge)
{
	struct optsw_xcp_class_key key = { .node = tb_node_id };
	const struct optsw_xcp_cfg *xc;
	__u32 node = tb_node_id, *cls;
	struct iphdr ip;

	if (pkt->out_cfg->flags & OPTSW_PORT_PEER_HOST)
		return;
	if (bpf_skb_load_bytes(skb, sizeof(struct ethhdr), &ip, sizeof(ip)) < 0)
		return;
	key.dst_ip = ip.daddr;
	cls = bpf_map_lookup_elem(&optsw_xcp_class, &key);
	if (!cls)
		return;
	pkt->cls = *cls;
	xc = bpf_map_lookup_elem(&optsw_xcp_cfg, &node);
	if (xc && xc->acks_separate && xcp_pure_ack(skb, &ip))
		pkt->cls += 1;
}

OPTSW_DECIDE(xcp_edge)
{
	const struct optsw_xcp_edge_cfg *c = (const void *)cfg->arch_cfg;
	__u64 ready = a + tau, d;

	if (pkt->out_cfg->flags & OPTSW_PORT_PEER_HOST) {
		/* as fifo: received whole, then FIFO on the output towards the host */
		d = max64(ready, ps->out_free_ns);
		if (d - ready > c->max_wait_ns)
			return OPTSW_DROP;
		*dep = d;
		return OPTSW_BUFFER;
	}
	return pkt->cls == OPTSW_XCP_NO_CLASS ? OPTSW_NOCFG : OPTSW_HOLD;
}
