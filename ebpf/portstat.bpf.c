// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * portstat: a tc (clsact, direct-action) observer that counts packets and
 * bytes per (node id, port id, direction).
 *
 * The identity of the port comes from read-only data set before load
 * (tbload load OBJ PIN_DIR PROG_DIR tb_node_id=N tb_port_id=P tb_direction=D),
 * never from skb->ifindex: ifindexes repeat across network namespaces.
 * The counters map is pinned by the loader and shared by every attachment
 * of one run. Updates are atomic, so concurrent CPUs never lose counts.
 * Always returns TC_ACT_OK: it only observes.
 *
 * The rodata names carry a tb_ prefix: vmlinux.h declares plain names such
 * as `port_id` (a typedef), which would clash.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "portstat.h"

#ifndef TC_ACT_OK
#define TC_ACT_OK 0
#endif
#ifndef BPF_NOEXIST
#define BPF_NOEXIST 1
#endif

const volatile __u32 tb_node_id = 0;
const volatile __u16 tb_port_id = 0;
const volatile __u8 tb_direction = PORTSTAT_DIR_INGRESS;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PORTSTAT_MAX_ENTRIES);
	__type(key, struct portstat_key);
	__type(value, struct portstat_value);
} port_counters SEC(".maps");

SEC("tc")
int portstat(struct __sk_buff *skb)
{
	struct portstat_key key = {
		.node = tb_node_id,
		.port = tb_port_id,
		.dir = tb_direction,
		.pad = 0,
	};
	__u64 len = skb->len;
	/* TCP always builds GSO skbs; with GSO off on the device they are segmented only
	 * after the clsact egress hook, so count the wire packets an skb will become. */
	__u64 segs = skb->gso_segs ? skb->gso_segs : 1;
	__u64 now = bpf_ktime_get_ns();
	struct portstat_value *val;

	val = bpf_map_lookup_elem(&port_counters, &key);
	if (!val) {
		struct portstat_value init = {
			.packets = segs,
			.bytes = len,
			.first_ns = now,
			.last_ns = now,
		};

		if (bpf_map_update_elem(&port_counters, &key, &init, BPF_NOEXIST) == 0)
			return TC_ACT_OK;
		/* Another CPU created the entry first (or the map is full). */
		val = bpf_map_lookup_elem(&port_counters, &key);
		if (!val)
			return TC_ACT_OK;
	}
	__sync_fetch_and_add(&val->packets, segs);
	__sync_fetch_and_add(&val->bytes, len);
	val->last_ns = now;
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
